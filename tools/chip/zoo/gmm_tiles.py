"""The grouped matmul's forward tiles at a prefill's rows, measured on the chip: the zoo's experts at 128 to 1,024
tokens (a few rows a group, 2 to 250), where the tile rule's first choice ran 0.83-0.98x `lax.ragged_dot`'s speed
(zoo shard 6). Each shape runs the package's call as a user makes it (`ops.ragged_dot`, the rule's tiles),
`lax.ragged_dot`, and the kernel at the rule's first `RANKED` tilings and at tilings of one contraction tile (the
weights block fetched once per group and output tile, with lookahead), each as the Op compiles it (lookahead where
the tiles allow it, the raised VMEM limit where they need it); calls timed back to back (`pipelined_s`), as a
model's program issues them. What the rule's cost of a group's weights fetch (`tokamax.moe.tiles`) is checked
against where a group's rows are few. Run as `python3 -m tools.chip sweep --only prefill`; `--only changed` times
the training calls whose choice a version of that cost moved (`BEFORE`), the tiles before beside the tiles now."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import ROUTING_SKEW
from ..workloads import Workload, group_sizes, normal
from .models import BY_NAME
from .shapes import experts

SHAPES = (("Qwen1.5-MoE-A2.7B", 256), ("Qwen2-57B-A14B", 256), ("Qwen3-30B-A3B", 128), ("gpt-oss-120b", 128),
          ("Mixtral 8x7B", 128), ("Qwen3-235B-A22B", 128), ("OLMoE 1B-7B", 1024), ("DeepSeek-V2-Lite", 512),
          ("Granite 3.0 1B-A400M", 256))
"""(model, tokens): groups of 8 to 128 experts, 2 to 1,000 rows a group, both projections each; Granite's experts
of 512 and 1,024 (after 1c55ab8: its forward ran 0.38-0.53x XLA's speed in the zoo, the kernel's model a third of
that)."""
RANKED = 4
WHOLE_ROWS = (128, 256)
WHOLE_COLUMNS = (512, 1024, 2048)


def _tilings(tk: ModuleType, m: int, k: int, n: int, groups: int) -> list:
    """The rule's first `RANKED` tilings, then those of one contraction tile that fit, the rule's order."""
    rule, on = tk.moe.tiles, tk.roofline.chip()
    ranked = rule.rank("gmm", m, k, n, groups, rule.candidates(m, k, n), on)
    chosen = rule.choose("gmm", m, k, n, groups, on)
    out = [chosen, *(t for t in ranked if t != chosen)][:RANKED]
    for t in ranked:
        if t.tk == k and t.tm in WHOLE_ROWS and (t.tn == n or t.tn in WHOLE_COLUMNS) and t not in out:
            out.append(t)
    return out


def workloads(tk: ModuleType) -> Iterator[Workload]:
    rd, rule = tk.ragged_dot, tk.moe.tiles
    hook = importlib.import_module(tk.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook")
    on = rule.roofline.chip()
    for model, tokens in SHAPES:
        for c in experts(BY_NAME[model], tokens):
            m, k, n, g = c.rows, c.hidden, c.out, c.experts
            case = f"{model}, {c.case}"
            flops = c.flops("fwd")

            def make(m=m, k=k, n=n, g=g, skew=c.skew) -> tuple:  # noqa: ANN001 - as the zoo makes them
                return normal(1, (m, k)), normal(2, (g, k, n), scale=k ** -0.5), group_sizes(m, g, skew=skew)

            yield Workload("grouped_matmul", case, "tokamax", "fwd", lambda make=make: (tk.ops.ragged_dot, make()),
                           flops)
            yield Workload("grouped_matmul", case, "xla", "fwd", lambda make=make: (jax.lax.ragged_dot, make()),
                           flops)
            for t in _tilings(tk, m, k, n, g):
                limit = rule.vmem_limit("gmm", t, on)

                def gmm(a, b, s, t=t, limit=limit):  # noqa: ANN001, ANN202 - as the Op calls the kernel
                    return rd.gmm(a, b, s, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16,
                                  tiling=tuple(t), rhs_lookahead=hook.rhs_lookahead(t.tn, t.tk),
                                  vmem_limit_bytes=limit, zero_padded_rows=True)

                name = f"gmm {t.tm}x{t.tk}x{t.tn}" + ("" if limit is None else f" (VMEM {limit >> 20} MiB)")
                predicted = rule.seconds("gmm", m, k, n, g, t, on)
                yield Workload("grouped_matmul", case, f"{name}, model {predicted * 1e3:.3f} ms", "fwd",
                               lambda f=gmm, make=make: (f, make()), flops)


BEFORE = {
    ('dlhs', 16384, 2048, 2816, 60): (128, 2048, 2816),
    ('dlhs', 32768, 2048, 2816, 60): (128, 2048, 2816),
    ('gmm', 32768, 3584, 5120, 64): (128, 3584, 1024),
    ('gmm', 32768, 2560, 3584, 64): (128, 2560, 3584),
    ('dlhs', 32768, 2560, 3584, 64): (128, 2560, 3584),
    ('gmm', 65536, 2048, 1536, 128): (128, 2048, 1536),
    ('dlhs', 65536, 2048, 1536, 128): (128, 2048, 1536),
    ('gmm', 8192, 4096, 12800, 16): (128, 4096, 1024),
    ('gmm', 8192, 6400, 4096, 16): (128, 6400, 2048),
    ('dlhs', 8192, 4096, 28672, 8): (256, 4096, 2048),
    ('gmm', 32768, 512, 1024, 32): (256, 512, 1024),
    ('dlhs', 32768, 512, 1024, 32): (256, 512, 1024),
    ('gmm', 32768, 2048, 2048, 64): (128, 2048, 2048),
    ('dlhs', 32768, 2048, 2048, 64): (128, 2048, 2048),
    ('dlhs', 32768, 1024, 2048, 64): (128, 1024, 2048),
    ('gmm', 24576, 2048, 2816, 64): (128, 2048, 2816),
    ('dlhs', 24576, 2048, 2816, 64): (128, 2048, 2816),
    ('gmm', 24576, 1408, 2048, 64): (128, 1408, 2048),
    ('dlhs', 32768, 7168, 4096, 8): (256, 1024, 4096),
    ('gmm', 65536, 7168, 4096, 8): (256, 7168, 1024),
    ('dlhs', 65536, 7168, 4096, 8): (256, 1024, 4096),
    ('gmm', 65536, 2048, 7168, 8): (512, 2048, 1024),
    ('dlhs', 65536, 2048, 7168, 8): (256, 1024, 7168),
    ('gmm', 16384, 2880, 5760, 32): (128, 2880, 2048),
    ('dlhs', 16384, 2880, 5760, 32): (128, 1024, 5760),
    ('gmm', 16384, 2880, 2880, 32): (128, 2880, 1024),
    ('dlhs', 16384, 2880, 2880, 32): (256, 2880, 2880),
    ('gmm', 32768, 2880, 2880, 32): (256, 2880, 2880),
    ('dlhs', 32768, 2880, 2880, 32): (256, 2880, 2880),
    ('gmm', 32768, 2880, 5760, 128): (128, 2880, 2048),
    ('dlhs', 32768, 2880, 2880, 128): (256, 2880, 2880),
}
"""The zoo's calls at 4,096 and 8,192 tokens where 20fb896's rule (a group's weights fetched ahead stalling nothing
where the HBM had no room) moved the choice: (kernel, m, k, n, groups) in the rule's names, and the tiles the rule
took before, and takes again since the v5e ran them 5-30% faster (-gmm-changed-20fb896.json)."""


def changed(tk: ModuleType) -> Iterator[Workload]:
    """Each call of `BEFORE` at the tiles before and at the rule's tiles now (the same tiles since 20fb896's were
    measured), as the Op compiles each."""
    rd, rule = tk.ragged_dot, tk.moe.tiles
    hook = importlib.import_module(tk.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook")
    on = rule.roofline.chip()
    for (kernel, m, k, n, g), before in BEFORE.items():
        case = f"{kernel}: {m} x {k} -> {n}, {g} experts, routing skew {ROUTING_SKEW:g}"
        flops = 2 * m * k * n
        dlhs = kernel == "dlhs"

        def make(m=m, k=k, n=n, g=g, dlhs=dlhs) -> tuple:  # noqa: ANN001 - dlhs: the output's gradient [m, n]
            return (normal(1, (m, n if dlhs else k)), normal(2, (g, k, n), scale=k ** -0.5),
                    group_sizes(m, g, skew=ROUTING_SKEW))

        for label, t in (("before", rule.Tiles(*before)), ("rule", rule.choose(kernel, m, k, n, g, on))):
            limit = rule.vmem_limit(kernel, t, on)

            def call(a, b, s, t=t, limit=limit, dlhs=dlhs):  # noqa: ANN001, ANN202 - as the Op calls the kernel
                return rd.gmm(a, b, s, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16,
                              tiling=(t.tm, t.tn, t.tk) if dlhs else tuple(t), transpose_rhs=dlhs,
                              rhs_lookahead=hook.rhs_lookahead(t.tn, t.tk), vmem_limit_bytes=limit,
                              zero_padded_rows=True)

            name = f"{label} {t.tm}x{t.tk}x{t.tn}, model {rule.seconds(kernel, m, k, n, g, t, on) * 1e3:.3f} ms"
            yield Workload(kernel, case, name, "fwd", lambda f=call, make=make: (f, make()), flops)
