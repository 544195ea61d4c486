"""The heads at training's rows where XLA's float32 logits fit the chip (the zoo's 4,096 tokens at small heads, where
zoo shard 10 found the package's defaults 0.68-0.95x XLA's speed): every way the package's rules weigh there, timed
beside XLA's plain formulation and the package's own choice, so that the rules' costs can be checked against the
chip way by way. Run when named only.

- the labels path's forward: the kernel (`row_stats`' default past 1,024 rows), XLA's formulation in chunks of rows
  (`stats.stored_forward`: what `row_stats` runs at 1,024 rows and fewer) at 1,024, 2,048 and all the rows;
- its forward and backward (`fused.loss_and_grads`): each way `fused._ways` offers at chunks of 1,024 and 2,048
  (XLA's float32 accumulator, the accumulator kernel into float32 and the pairs, the streamed kernels with compact
  logits), XLA's accumulator over all the rows as one chunk, the kernels;
- the forward's chunks at the benchmark's own heads and rows (`models.HEADS`) too;
- TRL's statistics forward and backward (`statistics`): the package's choice, the kernels, the stored scheme;
- per-token distillation (`distill.divergence`, JSD) for a same-family pair: each scheme (the stored one, its
  backward recomputing Q by vocabulary chunks, the kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from ..models import HEADS as BENCHMARK_HEADS
from ..workloads import Workload, with_grads
from ..workloads.lm_head import _head_args, distill_args
from . import baselines, shapes
from .models import BY_NAME

ROWS = 4096
CHUNKS = (1024, 2048)  # the chunks the rules weigh here; all the rows as one chunk beside them
FORWARD_CHUNKS = (1024, 2048, ROWS)


HEADS = ("Qwen3 0.6B", "Qwen3 1.7B", "Qwen3 4B", "Gemma 2 2B")  # their heads as the zoo reads them (`shapes.heads`)
PAIRS = ("Gemma 2 2B", "Qwen3 0.6B")  # students, each with its zoo teacher (`shapes.distillation`, the JSD)
BETA = shapes.JSD_BETA


def _way_name(c: Any) -> str:
    """A chunked way's impl, in the names `predict` and the other LM-head workloads use."""
    if c.streamed:
        return f"tokamax (chunks of {c.chunk}, streamed, compact, pair accumulator{', int8 low' if c.scaled else ''})"
    return (f"tokamax (chunks of {c.chunk}{', pair accumulator' if c.pair else ''}{', int8 low' if c.scaled else ''}"
            f"{', accumulator kernel' if c.kernel else ''})")


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head, fused = tk.lm_head, tk.lm_head.fused
    chip = tk.roofline.chip()

    def labels(transform: Any, chunk: object, **way: Any) -> Callable[..., tuple]:
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> tuple:
            weights = jnp.ones(t.shape, jnp.float32)
            return fused.loss_and_grads(x, w, None, t, weights, transform, chunk=chunk, **way)[:3]
        return fn

    def forward(transform: Any, chunk: int | None) -> Callable[..., jax.Array]:
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            s = (lm_head.row_stats(x, w, None, t, transform) if chunk is None
                 else lm_head.stats.stored_forward(x, w, None, t, transform, chunk, 0)[0])
            return jnp.sum(s.lse - s.target_logit)
        return fn

    def statistics(transform: Any, scheme: str) -> Callable[..., jax.Array]:
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            s = lm_head.statistics(x, w, None, t, transform, scheme=scheme)
            return -(s.target_logit - s.lse).sum() + s.entropy.sum()
        return fn

    for model in HEADS:
        h = shapes.heads(BY_NAME[model], ROWS)[0]
        transform = lm_head.LogitTransform.of(scale=h.scale, soft_cap=h.soft_cap)
        case = f"{model} head: {ROWS} rows, hidden {h.hidden}, vocabulary {h.vocab}" + (
            f", soft cap {h.soft_cap:g}" if h.soft_cap else "")
        flops = 2 * ROWS * h.hidden * h.vocab

        def make(h=h) -> tuple:  # noqa: ANN001
            return _head_args(ROWS, h.hidden, h.vocab)

        def add(op: str, impl: str, pass_: str, fn: Callable[..., Any], f: float, case: str = case,
                make: Callable[[], tuple] = make) -> Workload:
            return Workload(op, case, impl, pass_, lambda: (fn, make()), f)

        yield add("lm_head_loss", "tokamax", "fwd", forward(transform, None), flops)
        for c in FORWARD_CHUNKS:
            yield add("lm_head_loss", f"tokamax (XLA's formulation, chunks of {c})", "fwd", forward(transform, c),
                      flops)
        yield add("lm_head_loss", "xla", "fwd", baselines.labels(h.scale, h.soft_cap), flops)
        yield add("lm_head_loss", "tokamax", "fwd+bwd", labels(transform, "auto"), 3 * flops)
        yield add("lm_head_loss", "tokamax (kernels)", "fwd+bwd", labels(transform, None), 3 * flops)
        yield add("lm_head_loss", f"tokamax (chunks of {ROWS})", "fwd+bwd", labels(
            transform, ROWS, pair_accumulator=False, accumulator_kernel=False, scaled_low=False, streamed=False),
            3 * flops)
        for chunk in CHUNKS:
            for c in fused._ways(chunk, ROWS, h.hidden, h.vocab, 2, chip, True, soft_cap=h.soft_cap is not None):
                way = ({"streamed": True, "compact": True, "pair_accumulator": True, "scaled_low": c.scaled}
                       if c.streamed else {"pair_accumulator": c.pair, "accumulator_kernel": c.kernel,
                                           "scaled_low": c.scaled, "streamed": False})
                yield add("lm_head_loss", _way_name(c), "fwd+bwd", labels(transform, chunk, **way), 3 * flops)
        yield add("lm_head_loss", "xla", "fwd+bwd", with_grads(baselines.labels(h.scale, h.soft_cap), (0, 1)),
                  3 * flops)
        for impl, scheme in (("tokamax", "auto"), ("tokamax (kernels)", "kernels"), ("tokamax (stored)", "stored")):
            yield add("lm_head_statistics", impl, "fwd+bwd", with_grads(statistics(transform, scheme), (0, 1)),
                      3 * flops)
        yield add("lm_head_statistics", "xla", "fwd+bwd",
                  with_grads(baselines.statistics(h.scale, h.soft_cap), (0, 1)), 3 * flops)

    for h in BENCHMARK_HEADS:  # the forward's chunks at the benchmark's heads and rows
        case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"
        for c in (*FORWARD_CHUNKS, h.rows):
            yield Workload("lm_head_loss", case, f"tokamax (XLA's formulation, chunks of {c})", "fwd",
                           lambda h=h, c=c: (forward(lm_head.IDENTITY, c), _head_args(h.rows, h.hidden, h.vocab)),
                           2 * h.rows * h.hidden * h.vocab)

    for student in PAIRS:
        d = next(c for c in shapes.distillation(BY_NAME[student], ROWS) if c.op == "distillation")
        teacher = next(t for s, t in shapes.PAIRS if s == student)
        cap = f", soft cap {d.student_cap:g}" if d.student_cap else ""
        case = (f"{student} from {teacher} (JSD, beta {BETA}): {d.rows} rows, student {d.student_hidden}, teacher "
                f"{d.teacher_hidden}, vocabulary {d.vocab}{cap}")
        caps = {"student_scale": d.student_scale, "student_soft_cap": d.student_cap,
                "teacher_scale": d.teacher_scale, "teacher_soft_cap": d.teacher_cap}
        f = d.flops("fwd+bwd")

        def jsd(scheme: str, caps=caps) -> Callable[..., jax.Array]:  # noqa: ANN001
            def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> jax.Array:
                return tk.distill.divergence(xs, ws, None, xt, wt, None, beta=BETA, scheme=scheme, **caps)[0].sum()
            return loss

        per_token = baselines.divergence(BETA, (d.student_scale, d.student_cap), (d.teacher_scale, d.teacher_cap))

        def xla(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array, per_token=per_token) -> jax.Array:  # noqa: ANN001
            return per_token(xs, ws, xt, wt).sum()

        for impl, fn in (("tokamax", jsd("auto")), ("tokamax (stored)", jsd("stored")),
                         ("tokamax (recompute)", jsd("recompute")), ("tokamax (kernels)", jsd("kernels")),
                         ("xla", xla)):
            yield Workload("distillation", case, impl, "fwd+bwd",
                           lambda d=d, fn=fn: (with_grads(fn, (0, 1)), distill_args(d)), f)
