"""The LM head's per-row statistics at any size, in JAX: padding around the kernels, the cotangents
turned into the backward kernels' per-row coefficients, and a differentiable call for JAX users.

Per row r of x [rows, hidden], against w [vocab, hidden] (and a bias [vocab]), with
z = transform(x @ w.T + b) and p = softmax(z):

- In this order (`OUTPUTS`, `RowStats`): lse = log sum_j e^z_j; target_logit = z[target]; mean_logit =
  E_p[z] = sum_j p_j z_j (lse - entropy); log_sum_sq_probs = log sum_j p_j^2; sum_logits = sum_j z_j
  (the mean logit over the vocabulary is sum_logits / vocab); top1 = 1.0 where the target is the first
  maximum of z (else 0.0); entropy = -sum_j p_j log p_j (accumulated shifted by the row's maximum:
  `kernels`). The entropy was added last: the first six keep the places they had when the kernel gave
  E_p[z] in the third (a caller unpacking by position gets what it got).
- Differentiable in lse, target_logit, mean_logit, sum_logits and entropy (what log-probabilities, the
  entropy, z-loss and label smoothing are made of); log_sum_sq_probs and top1 are not.
- A target outside [0, vocab) is refused where it can be read for free, else its row is NaN in
  every statistic and adds nothing to the gradients (`targets`).

Padding: rows to the forward's row block (`plan`; zero rows, target 0, dropped after; in the
backward their lse is +inf, so their p is exactly 0 whatever their logits transform(bias) are: 0 would
make p = e^z, which overflows at a bias of 10 and a temperature of 0.1), the bias (float32 [vocab]) to
the widest vocabulary grid. The weight is never copied (the kernels read the vocabulary's last block in
place and mask it), except a weight of fewer than 128 rows, padded to 128.

Two schemes for `statistics` (`SCHEMES`): the kernels, and `stored` (plain XLA in chunks of rows, the softmax p
in x's dtype kept for the backward for the rows an eighth of HBM holds, the other rows' logits computed again:
three matmuls for a kept row, four for the others, the kernels' five); "auto" (`choose_scheme`) takes the stored
one where a layout of it fits the chip's share and its roofline beats the kernels', else the kernels. The v5e
timed both (benchmarks/measured/v5e-2026-12-05-bench-lm_head_statistics-a6fed56.json, forward and backward):
Qwen3 8B's head at 2,048 rows, the stored scheme 57.8 ms, the kernels 73.7, XLA's formulation 51.3; at 8,192
rows 217.0, 288.9 and 211.3; Gemma 3 4B's at 8,192 rows 272.0 and 350.4, where XLA's did not fit.

Layout: where the hidden size is not a multiple of 128 (`plan.transposed`) the kernels get x.T and w.T
and give dx.T and dw.T, transposed back here: on a TPU, whose default layout of such an array is
column-major, each of those transposes is a bitcast, not a copy (gpt-oss's hidden 2880: 2.3 GiB of
copies otherwise). Elsewhere they get x and w as they are.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import checks, hosts, roofline
from . import kernels, stored
from . import plan as plans
from . import targets as target_checks
from .blocks import KERNELS, LANES, round_up
from .cost import HBM_SHARE, OUTPUT_VECTORS, STATISTICS_SECONDS, Chip, chip
from .transform import IDENTITY, LogitTransform


class RowStats(NamedTuple):
    """float32 [rows] each (see the module docstring); new fields go last."""

    lse: jax.Array
    target_logit: jax.Array
    mean_logit: jax.Array
    log_sum_sq_probs: jax.Array
    sum_logits: jax.Array
    top1: jax.Array
    entropy: jax.Array


OUTPUTS = RowStats._fields


def plan_for(x: jax.Array, w: jax.Array) -> plans.Plan:
    """Each kernel's blocks for these operands on the chip being traced for."""
    return plans.choose(x.shape[0], x.shape[1], w.shape[0], jnp.dtype(x.dtype).itemsize, chip())


def _check(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array) -> None:
    checks.rank("lm_head", "x", x, (2,), "[rows, hidden]")
    checks.rank("lm_head", "w", w, (2,), "[vocab, hidden]")
    checks.array("lm_head", "targets", targets)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"tokamax lm_head: x must be [rows, hidden] and w [vocab, hidden], got {x.shape} and "
                         f"{w.shape}")
    if x.dtype != w.dtype or x.dtype not in (jnp.bfloat16, jnp.float32):
        raise TypeError(f"tokamax lm_head: x and w must share a dtype, bfloat16 or float32; got {x.dtype} and "
                        f"{w.dtype}")
    if targets.shape != (x.shape[0],):
        raise ValueError(f"tokamax lm_head: targets must be [rows] ({x.shape[0]}), got {targets.shape}")
    checks.integers("lm_head", "targets", targets)  # float targets would be read as indices
    if b is not None and b.shape != (w.shape[0],):
        raise ValueError(f"tokamax lm_head: the bias must be [vocab] ({w.shape[0]}), got {b.shape}")


def _padded(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, plan: plans.Plan
            ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """x, w (both transposed where `plan.transposed`), the bias [1, grid] and targets as the kernels take them."""
    rows, vocab = x.shape[0], w.shape[0]
    extra_rows = plan.rows - rows
    grid_vocab = max(round_up(vocab, plan[k].vocab) for k in KERNELS)
    bias = jnp.zeros((vocab,), jnp.float32) if b is None else b.astype(jnp.float32)
    if vocab < LANES:  # a weight narrower than one block: the only one copied
        w = jnp.pad(w, ((0, LANES - vocab), (0, 0)))
    x = jnp.pad(x, ((0, extra_rows), (0, 0)))
    if plan.transposed:
        x, w = x.T, w.T
    return x, w, jnp.pad(bias, (0, grid_vocab - vocab))[None], jnp.pad(targets.astype(jnp.int32), (0, extra_rows))


def _row_stats(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
               transform: LogitTransform, plan: plans.Plan | None = None) -> RowStats:
    """The kernels' statistics, the rows of out-of-range targets NaN."""
    plan = plan or plan_for(x, w)
    xp, wp, bp, tp = _padded(x, w, b, targets, plan)
    out = kernels.forward(xp, wp, bp, tp, transform=transform, blocks=plan.forward, true_vocab=w.shape[0],
                          transposed=plan.transposed)
    lse, target_logit, entropy, log_sum_sq_probs, sum_logits, top1 = target_checks.nan_rows(
        [o[:x.shape[0]] for o in out], targets, w.shape[0])  # kernels.FORWARD_OUTPUTS
    return RowStats(lse, target_logit, lse - entropy, log_sum_sq_probs, sum_logits, top1, entropy)


XLA_LOGIT_BYTES = 2 * 4
"""Bytes of HBM traffic per logit in XLA's formulation of the forward (`stored_forward` in one chunk): the float32
logits written by the matmul and read back by the reductions (the v5e's compiler, compile-only, at 1,024 rows: the
same flops and bytes as XLA's own program)."""
XLA_REDUCTIONS = 2
"""The reductions across the vocabulary XLA's formulation of a loss makes (the maximum and the sum of exponentials;
the target's logit is a gather), of the kernel's `cost.OUTPUT_VECTORS`: each costs its share of the kernel's measured
`cost.STATISTICS_SECONDS`, vector work the matmul does not hide. With it the model is within 10% of XLA's four
measured times at 1,024 rows (3.83 against 4.23 ms at Llama 3.2 1B's head, 16.09 against 15.13 at Qwen2.5 72B's), and
puts the kernel ahead at 256 rows, as the chip does (1.77 against 1.87 ms at Llama 3.2 1B's, 4.51 against 4.73 at
Qwen2.5 72B's)."""


def xla_forward_seconds(rows: int, hidden: int, vocab: int, itemsize: int, on: Chip) -> float:
    """XLA's formulation of the forward by the one cost model (`roofline.seconds`): one matmul, x and w read once,
    the float32 logits written and read (`XLA_LOGIT_BYTES`), and its reductions' vector work (`XLA_REDUCTIONS`).
    In chunks of rows (`stored.forward`, as `row_stats` runs it past `stored.CHUNKS[0]` rows) the same: the v5e ran
    chunks of 1,024 within 1% of one chunk of all the rows at 4,096 rows of four heads, and within 2% at Qwen3 8B's
    16,384 (8% at Llama 3 8B's 8,192; `v5e-2026-12-07-bench-lm_head_rows-forward-0817c36.json`): w's read again per
    chunk hides under the chunk's matmul."""
    flops = 2 * rows * hidden * vocab
    moved = (rows + vocab) * hidden * itemsize + rows * vocab * XLA_LOGIT_BYTES
    reductions = rows * vocab * roofline.scaled(STATISTICS_SECONDS, on) * XLA_REDUCTIONS / OUTPUT_VECTORS
    return roofline.seconds(flops, moved, 0, on, serial=reductions)


def xla_forward(rows: int, hidden: int, vocab: int, itemsize: int, on: Chip | None = None) -> bool:
    """Whether `row_stats` (no plan given) runs XLA's formulation rather than the forward kernel: in chunks of
    `stored.CHUNKS[0]` rows (one for fewer), where a chunk's float32 logits fit the chip's share and the cost model
    puts it under the kernel. The kernel makes all six statistics online after each step's matmul
    (`cost.STATISTICS_SECONDS`, which the MXU does not hide), where XLA makes only those the caller reads (a loss: lse
    and the target's logit) and hides its logits' traffic under the matmul where the matmul is the longer. The v5e at
    1,024 rows (`v5e-2026-12-07-lmhead-onechunk-1024-bd81221-base.json`, medians): the kernel 5.21, 10.21, 8.45 and
    15.91 ms at Llama 3.2 1B's, Gemma 2 2B's, Qwen2.5 7B's and 72B's heads, XLA 4.23, 8.50, 7.73 and 15.13, the
    kernel's first calls 24.4, 11.5, 26.1 and 13.8 s (a [rows, 1024] float32 body for Mosaic). With this rule
    (`v5e-2026-12-07-zoo-lmhead-fwd-1024-7e630cf.json`) the package's forward is XLA's time (4.37 against 4.38 ms,
    7.53 against 7.59, 14.95 against 15.07) and its first call 1.0-2.5 s. At 4,096 rows (zoo shard 10) the kernel
    took 0.68-0.95x XLA's speed at all ten heads, as the model says (within 10% of both sides' times): past 1,024
    rows the rule had held the kernel only because that side was not measured. With this rule
    (`v5e-2026-12-07-bench-lm_head_rows-defaults-0817c36.json`) the forward at 4,096 rows is 10.93, 18.19 and 21.83
    ms at Qwen3 0.6B's, 1.7B's and 4B's heads against XLA's 10.83, 17.85 and 21.10, at Gemma 2 2B's capped one 33.47
    against 32.09 in 0.98 GiB of temporaries where XLA holds 3.91; at the benchmark's heads 56.80, 136.58 and 70.76 ms
    against XLA's 52.37, 134.45 and 69.58 (the kernel's were 66.7 and 156.7 at the first two), XLA holding 3.9-9.3
    GiB. At 256 rows, bound by the weight's read, the kernel stays (`XLA_REDUCTIONS`)."""
    on = on or chip()
    if rows < 1:
        return False
    chunk = stored.chunk_for(rows, stored.CHUNKS[0])
    lay = stored.Layout(chunk, 0, stored.step_columns(rows, vocab))
    if stored.temporaries(rows, vocab, itemsize, lay, hidden, on.kind) > on.hbm // HBM_SHARE:
        return False
    kernel = plans.choose(rows, hidden, vocab, itemsize, on).costs(hidden, vocab, itemsize)["forward"].seconds(on)
    return xla_forward_seconds(rows, hidden, vocab, itemsize, on) < kernel


@hosts.emulated("lm_head.row_stats")
def row_stats(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
              transform: LogitTransform = IDENTITY, *, plan: plans.Plan | None = None) -> RowStats:
    """The statistics of every row; `targets` int [rows] in [0, vocab): others refused where they are on
    the host, else their rows NaN (`targets`). `plan`: the kernels' blocks (default: `plan.choose`'s, or XLA's
    formulation in one chunk where `xla_forward` says)."""
    _check(x, w, b, targets)
    target_checks.refuse("lm_head", targets, w.shape[0])
    if plan is None and xla_forward(x.shape[0], x.shape[1], w.shape[0], jnp.dtype(x.dtype).itemsize):
        return stored_forward(x, w, b, targets, transform, stored.chunk_for(x.shape[0], stored.CHUNKS[0]), 0)[0]
    return _row_stats(x, w, b, targets, transform, plan)


def coefficients(stats: RowStats, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array, d_sum: jax.Array
                 ) -> tuple[jax.Array, ...]:
    """The backward kernels' per-row (a, b, c, d), with d(loss)/dz_j = p_j (a + b log p_j) + c [j = target]
    + d, from the cotangents of lse, target_logit, entropy and sum_logits: d lse/dz_j = p_j,
    d entropy/dz_j = -p_j (log p_j + entropy), both in log p = z - lse (no z of ~40 cancelling another)."""
    a = d_lse - d_entropy * stats.entropy
    return a, -d_entropy, d_target, d_sum


@hosts.emulated("lm_head.row_stats_vjp")
def row_stats_vjp(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                  entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array,
                  d_sum: jax.Array, transform: LogitTransform = IDENTITY, weight_grad: bool = True, *,
                  plan: plans.Plan | None = None) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(dx, dw in their dtypes, db float32 [vocab]) from the forward's lse and entropy and the
    cotangents (float32 [rows] each) of lse, target_logit, entropy and sum_logits. The rows of
    out-of-range targets (NaN in the forward) add nothing, whatever their cotangents. `weight_grad`
    False: (dx, None, None), the weight's kernel not run (a frozen head: LoRA's)."""
    _check(x, w, b, targets)
    plan = plan or plan_for(x, w)
    rows, vocab = x.shape[0], w.shape[0]
    xp, wp, bp, tp = _padded(x, w, b, targets, plan)
    partial = RowStats(lse, None, None, None, None, None, entropy)
    coeffs = coefficients(partial, *(g.astype(jnp.float32) for g in (d_lse, d_target, d_entropy, d_sum)))
    extra = plan.rows - rows
    # padded rows and those of out-of-range targets: lse +inf (p exactly 0, whatever their logits), 0 coefficients
    lse, coeffs = target_checks.dropped(lse.astype(jnp.float32), coeffs, targets, vocab)
    row_in = [jnp.pad(lse, (0, extra), constant_values=jnp.inf), *(jnp.pad(v, (0, extra)) for v in coeffs)]
    flip = plan.transposed
    dx = kernels.backward_x(xp, wp, bp, tp, *row_in, transform=transform, blocks=plan.backward_x, true_vocab=vocab,
                            transposed=flip)
    dx = (dx.T if flip else dx)[:rows]
    if not weight_grad:
        return dx, None, None
    dw, db = kernels.backward_w(xp, wp, bp, tp, *row_in, transform=transform, blocks=plan.backward_w,
                                true_vocab=vocab, transposed=flip)
    return dx, (dw.T if flip else dw)[:vocab], db[0, :vocab]


SCHEMES = ("auto", "kernels", "stored")


def kernels_seconds(rows: int, hidden: int, vocab: int, itemsize: int, on: Chip, soft_cap: bool = False) -> float:
    """The kernels' forward and both backward kernels on `on`, at `plan.choose`'s blocks (`cost`'s roofline)."""
    plan = plans.choose(rows, hidden, vocab, itemsize, on)
    return sum(c.seconds(on) for c in plan.costs(hidden, vocab, itemsize, soft_cap=soft_cap).values())


def choose_layout(rows: int, hidden: int, vocab: int, itemsize: int, transform: LogitTransform = IDENTITY,
                  on: Chip | None = None) -> stored.Layout | None:
    """The stored scheme's layout where one fits 1/`HBM_SHARE` of the chip's HBM (`stored.layout`) and its roofline
    is below the kernels', else None (the kernels): the stored scheme's three matmuls for the rows it keeps and four
    for the others beat the kernels' five on the chip (the module docstring's figures); where even dx's accumulator
    is past the share, only the kernels keep the rows' arrays out of HBM."""
    on = on or chip()
    lay = stored.layout(rows, vocab, itemsize, on, hidden, transform.tanh)
    if lay is None:
        return None
    mine = stored.cost(rows, hidden, vocab, itemsize, lay, soft_cap=transform.tanh).seconds(on)
    return lay if mine <= kernels_seconds(rows, hidden, vocab, itemsize, on, transform.tanh) else None


def choose_scheme(rows: int, hidden: int, vocab: int, itemsize: int, transform: LogitTransform = IDENTITY,
                  on: Chip | None = None) -> str:
    """"stored" where `choose_layout` gives a layout, else "kernels"."""
    return "kernels" if choose_layout(rows, hidden, vocab, itemsize, transform, on) is None else "stored"


def stored_layout(rows: int, hidden: int, vocab: int, itemsize: int, transform: LogitTransform = IDENTITY,
                  on: Chip | None = None) -> stored.Layout:
    """`stored.layout` on the chip being traced for, or where none fits the share the least a call can take
    (`stored.smallest`: asked for, the scheme runs past the share)."""
    on = on or chip()
    return stored.layout(rows, vocab, itemsize, on, hidden, transform.tanh) or stored.smallest(rows, vocab)


@hosts.emulated("lm_head.statistics")
def statistics(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
               transform: LogitTransform = IDENTITY, *, scheme: str = "auto", layout: stored.Layout | None = None
               ) -> RowStats:
    """`row_stats`, differentiable in x, w and b (b [vocab], its gradient in its dtype; None for a head
    without one, which then gets no gradient). The rows of out-of-range targets are NaN and pass no
    gradient back. `scheme`: "kernels" (ours: no [rows, vocab] array anywhere; the backward computes the
    logits again), "stored" (`stored`: plain XLA, p [rows, vocab] in x's dtype kept for the rows that fit the
    share, the others' logits computed again in the backward; at `layout`, default `stored_layout`'s) or "auto"
    (`choose_scheme` on the chip being traced for)."""
    _check(x, w, b, targets)
    if scheme not in SCHEMES:
        raise ValueError(f"tokamax lm_head: scheme must be one of {SCHEMES}, got {scheme!r}")
    target_checks.refuse("lm_head", targets, w.shape[0])
    shape = (x.shape[0], x.shape[1], w.shape[0], jnp.dtype(x.dtype).itemsize)
    if scheme == "auto":
        layout = choose_layout(*shape, transform)
        scheme = "kernels" if layout is None else "stored"
    if scheme == "stored":
        layout = layout or stored_layout(*shape, transform)
        stored.check(x.shape[0], layout)
        return _stored_statistics(x, w, b, targets, transform, layout)
    return _statistics(x, w, b, targets, transform)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _statistics(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
                transform: LogitTransform) -> RowStats:
    return _row_stats(x, w, b, targets, transform)


def _statistics_fwd(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
                    transform: LogitTransform) -> tuple[RowStats, tuple]:
    stats = _row_stats(x, w, b, targets, transform)
    return stats, (x, w, b, targets, stats.lse, stats.entropy)


@hosts.emulated("lm_head.statistics")
def _statistics_bwd(transform: LogitTransform, residuals: tuple, cotangents: RowStats) -> tuple:
    x, w, b, targets, lse, entropy = residuals
    d_mean = cotangents.mean_logit  # mean_logit = lse - entropy
    dx, dw, db = row_stats_vjp(x, w, b, targets, lse, entropy, cotangents.lse + d_mean, cotangents.target_logit,
                               cotangents.entropy - d_mean, cotangents.sum_logits, transform)
    return dx, dw, None if b is None else db.astype(b.dtype), None


_statistics.defvjp(_statistics_fwd, _statistics_bwd)


def _bias(b: jax.Array | None, vocab: int) -> jax.Array:
    return jnp.zeros((vocab,), jnp.float32) if b is None else b.astype(jnp.float32)


def stored_forward(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, transform: LogitTransform,
                   chunk: int, kept: int) -> tuple[RowStats, jax.Array]:
    """The stored scheme's statistics (NaN rows where a target is outside the vocabulary) and its residual p
    [kept, vocab] in x's dtype, under a soft cap their float32 logits (`stored.forward`)."""
    vectors, p = stored.forward(x, w, _bias(b, w.shape[0]), targets, transform, chunk, kept)
    lse, target_logit, entropy, log_sum_sq_probs, sum_logits, top1 = target_checks.nan_rows(
        list(vectors), targets, w.shape[0])
    return RowStats(lse, target_logit, lse - entropy, log_sum_sq_probs, sum_logits, top1, entropy), p


def stored_vjp(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, p: jax.Array, lse: jax.Array,
               entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array, d_sum: jax.Array,
               transform: LogitTransform, columns: int, *, weight_grad: bool = True
               ) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(dx, dw, db float32 [vocab]; dw and db None where not `weight_grad`) of the stored scheme from `stored_forward`'s
    p, lse and entropy and the cotangents of lse, target_logit, entropy and sum_logits (the mean logit's folded in
    by the caller, as `row_stats_vjp` takes them), `columns` vocabulary columns per step; a NaN row adds nothing."""
    partial = RowStats(None, None, None, None, None, None, entropy)
    coeffs = coefficients(partial, *(g.astype(jnp.float32) for g in (d_lse, d_target, d_entropy, d_sum)))
    lse, coeffs = target_checks.dropped(lse.astype(jnp.float32), coeffs, targets, w.shape[0])
    return stored.backward(x, w, _bias(b, w.shape[0]), p, lse, targets, tuple(coeffs), transform, columns,
                           weight_grad=weight_grad)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _stored_statistics(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
                       transform: LogitTransform, layout: stored.Layout) -> RowStats:
    return stored_forward(x, w, b, targets, transform, layout.chunk, 0)[0]


def _stored_statistics_fwd(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array,
                           transform: LogitTransform, layout: stored.Layout) -> tuple[RowStats, tuple]:
    stats, p = stored_forward(x, w, b, targets, transform, layout.chunk, layout.kept)
    return stats, (x, w, b, targets, p, stats.lse, stats.entropy)


def _stored_statistics_bwd(transform: LogitTransform, layout: stored.Layout, residuals: tuple,
                           cotangents: RowStats) -> tuple:
    x, w, b, targets, p, lse, entropy = residuals
    d_mean = cotangents.mean_logit  # mean_logit = lse - entropy
    dx, dw, db = stored_vjp(x, w, b, targets, p, lse, entropy, cotangents.lse + d_mean, cotangents.target_logit,
                            cotangents.entropy - d_mean, cotangents.sum_logits, transform, layout.columns)
    return dx, dw, None if b is None else db.astype(b.dtype), None


_stored_statistics.defvjp(_stored_statistics_fwd, _stored_statistics_bwd)
