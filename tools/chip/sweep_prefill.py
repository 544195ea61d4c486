"""The grouped matmul's forward tiles at a prefill's rows, measured on the chip: the zoo's experts at 128 to 1,024
tokens (a few rows a group, 2 to 250), where the tile rule's first choice ran 0.83-0.98x `lax.ragged_dot`'s speed
(zoo shard 6). Each shape runs the package's call as a user makes it (`ops.ragged_dot`, the rule's tiles),
`lax.ragged_dot`, and the kernel at the rule's first `RANKED` tilings and at tilings of one contraction tile (the
weights block fetched once per group and output tile, with lookahead), each as the Op compiles it (lookahead where
the tiles allow it, the raised VMEM limit where they need it); calls timed back to back (`pipelined_s`), as a
model's program issues them. What the rule's cost of a group's weights fetch (`tokamax.moe.tiles`) is checked
against where a group's rows are few. Run as `python3 -m tools.chip sweep --only prefill`."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from .workloads import Workload, group_sizes, normal
from .zoo.models import BY_NAME
from .zoo.shapes import experts

SHAPES = (("Qwen1.5-MoE-A2.7B", 256), ("Qwen2-57B-A14B", 256), ("Qwen3-30B-A3B", 128), ("gpt-oss-120b", 128),
          ("Mixtral 8x7B", 128), ("Qwen3-235B-A22B", 128), ("OLMoE 1B-7B", 1024), ("DeepSeek-V2-Lite", 512))
"""(model, tokens): groups of 8 to 128 experts, 2 to 1,000 rows a group, both projections each."""
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
