"""The LM head's statistics in plain XLA with the softmax stored for the rows that fit: three matmuls where p is kept,
four where it is computed again. TRL's path (log-probabilities, the entropy, ...) cannot know its cotangents in the
forward, so the kernels' backward computes the logits again (twice: once per gradient kernel, five matmuls in all,
1.44x XLA's time on the v5e at Qwen3 8B's head). Here the forward keeps what the backward needs instead, for as many
rows as the chip's share holds.

Per row r, with z = transform(x @ w.T + b) and p = softmax(z), every differentiable statistic's gradient to z
is p_j (a + b log p_j) + c [j = target] + d for per-row (a, b, c, d) made of the cotangents (`stats.coefficients`),
times dz/dl (one number per row without a soft cap: a scale or a temperature). So p alone, [rows, vocab] in x's
dtype, is the residual of a row, or its lse (one float) where the backward computes its logits again.

- `forward`: a `lax.scan` over chunks of `Layout.chunk` rows (the rows padded with zeros to a multiple): per chunk
  the float32 logits (one matmul in the operands' dtype, float32 out), the six statistics the forward kernel gives
  (`kernels.FORWARD_OUTPUTS`' order), and p in x's dtype for the first `Layout.kept` rows. No chunk holds more than
  its own [chunk, vocab] logits.
- `backward`: a `lax.scan` over the vocabulary, `Layout.columns` columns at a time (the last, narrower step after
  it): per step the kept rows' p is read, the other rows' logits are computed again (p = e^(z - lse), exact in
  float32), G = dz/dl (p (a + b log p) + c [j = target] + d) in float32 is rounded once to x's dtype (as TRL rounds
  its logits' gradient to the compute dtype), then dw's rows for those columns = G.T @ x (whole: every row is in
  the step), db's = sum_r G in float32, and dx += G @ w[columns] into a float32 [rows, hidden] accumulator. No
  [rows, vocab] array but p; in bf16 p is rounded once (2^-8 relative: 8 significant bits): log p to about 2^-8
  absolute, so G's error is p's. An entry of p below bf16's smallest number (z more than ~87 under the row's
  log-sum-exp) is 0, and so is its term p log p.

A soft cap makes dz/dl differ per logit (1 - tanh^2), which p does not give back to bf16's precision near the cap:
there a kept row holds its float32 logits z instead (`KEPT_LOGITS`: p = e^(z - lse) and dz/dl = pre post (1 -
(z / post)^2), both exact in float32), twice p's bytes, so `layouts` keeps them only where the rows are one chunk
(`WHOLE`); elsewhere every row's logits are computed again, dz/dl with them. `layout` takes the
chunk, the kept rows and the columns whose temporaries (`temporaries`) fit an eighth of HBM at the least `cost`;
`cost` is the scheme's roofline (`tools.chip bench` times it as "tokamax (stored)" beside the kernels and XLA).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import roofline
from .blocks import LANES, round_up
from .cost import HBM_SHARE, STATISTICS_SECONDS, StoredCost
from .softmax import log_softmax
from .transform import LogitTransform

CHUNKS = (1024, 512, 256)
"""The forward's chunk rows, largest first: each chunk reads the whole weight (1.24 GB at Qwen3 8B's head in bf16),
so at 256 rows a chunk's matmul (1.9 ms on the v5e) is about as long as that read (2.1 ms), and smaller chunks only
lose."""
COLUMNS = (512, 8192)
"""The backward's vocabulary columns per step, least and most (`step_columns`)."""
STEP_ENTRIES = 1 << 24
"""[rows, columns] entries a backward step's G holds at most (32 MiB in bf16), the widest such power of two taken: the
v5e timed Qwen3 8B's head at 8,192 rows in 289.6, 228.0, 217.0, 229.8 and 238.8 ms in steps of 512 to 8,192
columns, Gemma 3 4B's at 8,192 rows in 288.1, 297.4, 272.3, 287.9 and 302.1, and Qwen's at 2,048 rows in 62.5,
60.3, 59.1, 58.5 and 57.8 (benchmarks/measured/v5e-2026-12-05-bench-lm_head_statistics_columns-d4a6fe2.json): a
step's arrays past that size lose more than twice as many steps do."""
KEPT_SECONDS = 6e-12
"""Seconds per logit of the backward's vector work over a kept row's p (G and its log p) that its matmuls do not
hide, on the v5e: fitted to the eleven layouts it timed at three heads (`tools.chip.predict`'s records, within 0.90
to 1.11 of each; a row whose logits are computed again fitted to none beyond its matmul). Other chips by
`roofline.scaled`."""
WEIGHT_COPIED = ("TPU7x",)
"""Chips whose compiler copies the weight and x before the scheme runs, and keeps a forward chunk's logits beside the
backward's arrays: the compile-only v7x (Qwen3 8B's head at 8,192 rows: 4,411 MiB, p 2,374, the weight 1,187, x 64,
dx's accumulator and a step 128, the logits 593)."""
LOGITS_HELD = 1
"""[chunk, vocab] float32 arrays a forward chunk holds: its logits (XLA fuses what is made from them into the
reductions and p's write; distillation's stored scheme, two models' logits, was laid out so on the v5e to the
byte)."""
P_CHUNKS_OFF_LANES = 2
"""[chunk, vocab rounded to the lanes] arrays of p in x's dtype a kept chunk holds beside its logits where the
vocabulary is off the lanes: the TPU lays p out column-major there, then pads it to the lanes (one array) and lays
that out row-major for p's stack (another). On the lanes p goes into its stack in place (Qwen3 8B's head at 8,192
rows on the v6e: counted to 0.3 MiB). The v6e's compiler (libtpu, compile-only) at Gemma 3 27B's head, 8,192 rows
kept 6,144 in chunks of 1,024: 5,186 MiB, p 3,072, the logits 1,024, two p chunks 512 each, x by chunks 84; the v5e's
at chunks of 512 and the v7x's alike. A bound, not always the layout: at 3,072 kept the v6e put the padded chunk where
the dead logits were (3,273 MiB against 3,670 counted)."""
WHOLE = "v5e-2026-12-07-lmhead-onechunk-1024-bd81221-patched.json"
"""The record (benchmarks/measured/) behind the layout `layouts` offers where the rows are one forward chunk (at most
`CHUNKS`' largest): every row's p kept and the backward in one step over the whole vocabulary, past `STEP_ENTRIES`
(measured only at 2,048 and 8,192 rows), which is XLA's own formulation with p kept in x's dtype (the v5e's compiler,
compile-only, at 256 rows x 3,584 -> 152,064: 148.6 MiB of temporaries, 4.14 GB moved against the zoo baseline's 4.22,
the same flops). In steps of 8,192 columns each step's dW block is made by its matmul, then copied into dW, neither
under the other (its steps' costs not modelled: the layout wins by its fewer steps' bytes alone). Forward and backward
at 1,024 rows, issued back to back, against the steps (`v5e-2026-12-07-lmhead-onechunk-1024-bd81221-base.json`, the
same session) and XLA: 20.90 ms, 26.72 and 21.75 at Qwen2.5 7B's head; 43.39, 64.11 and 46.88 at Qwen2.5 72B's; at 256
rows (`v5e-2026-12-07-lmhead-onechunk-256-bd81221-patched.json`, medians) 6.48 against 12.29 and 7.17 at Qwen2.5 7B's.
Under a soft cap the rows' float32 logits are kept in its place (`KEPT_LOGITS`); before, none were, and one step
recomputed the logits: Gemma 2 2B's head at 256 rows took 10.32 ms against XLA's 8.51 (the same as the steps',
10.27)."""
ONE_STEP_DW = "v5e-2026-12-07-zoo-prefill-loss-stats-128-c003b28.json"
"""The record behind `cost`'s one backward step writing dw once (no zeroing pass: nothing adds into it): TRL's
statistics at 128 rows of ten heads on the v5e after the change, at 0.88-1.01x XLA's time forward and backward (3.68
against 3.74 ms at Qwen3 1.7B's head). Counted as zeroed and written, the one-chunk layout's roofline sat above the
kernels' at 128 rows of most heads and at 256 of the smallest (SmolLM2 135M's, Gemma 3 1B's), so the statistics took
the kernels there, and the v5e ran them at 1.09-1.23x XLA's time
(`v5e-2026-12-07-zoo-prefill-distill-stats-128-512-44d0773.json`: 4.43 against 3.71 ms at Qwen3 1.7B's head), where
the same layout one row count up ran at XLA's (256 rows: 3.47 against 3.42 at Qwen2.5 0.5B's head). The compiler
agrees: at 256 rows of Qwen3 1.7B's head the layout moves 2.73 GB against XLA's 2.81 (libtpu 0.0.52, compile-only),
no zeroing pass in its program."""
KEPT_LOGITS = 4
"""Bytes a kept row holds per logit under a soft cap: its float32 logit z, from which the backward makes p and dz/dl
exactly, where p in x's dtype would not give dz/dl back near the cap. What XLA's own formulation keeps for its
backward (its float32 logits); three matmuls, where computing the logits again makes four. Offered in the one-chunk
layout (`WHOLE`) alone: past it, twice p's bytes per kept row has not been weighed on a chip."""
STEP_ARRAYS = 4
"""Bytes per [rows, columns] entry a backward step holds beside dx's accumulator: the v5e's compiler (the chip's libtpu
0.0.42.1, compile-only) held 128 MiB at Gemma 3 4B's 8,192 rows and 4,096 columns, G made once per step."""


class Layout(NamedTuple):
    """Where the scheme holds what: `chunk` rows per forward step, p kept for the first `kept` rows (a multiple
    of `chunk`, at most the rows padded to it; under a soft cap their float32 logits, `KEPT_LOGITS`), `columns`
    vocabulary columns per backward step."""

    chunk: int
    kept: int
    columns: int


def kept_itemsize(itemsize: int, soft_cap: bool) -> int:
    """Bytes per logit of a kept row: p in x's dtype, or under a soft cap its float32 logit (`KEPT_LOGITS`)."""
    return KEPT_LOGITS if soft_cap else itemsize


def kept_dtype(dtype: jnp.dtype, soft_cap: bool) -> jnp.dtype:
    """What a kept row holds (`kept_itemsize`): p in x's `dtype`, or under a soft cap float32 logits."""
    return jnp.dtype(jnp.float32) if soft_cap else jnp.dtype(dtype)


def chunk_for(rows: int, chunk: int) -> int:
    """`chunk` capped at the rows rounded up to 8 (one chunk, barely padded, for fewer rows; 8 for none)."""
    return min(chunk, round_up(max(rows, 1), 8))


def columns_for(vocab: int, columns: int) -> int:
    """`columns` capped at the vocabulary rounded up to the lanes (one step for a narrower vocabulary)."""
    return min(columns, round_up(max(vocab, 1), 128))


def step_columns(rows: int, vocab: int) -> int:
    """The backward's columns per step: the widest power of two of `COLUMNS`' range whose [rows, columns] G holds at
    most `STEP_ENTRIES` (the least where none does), capped at the vocabulary."""
    columns = COLUMNS[1]
    while columns > COLUMNS[0] and rows * columns > STEP_ENTRIES:
        columns //= 2
    return columns_for(vocab, columns)


def temporaries(rows: int, vocab: int, itemsize: int, layout: Layout, hidden: int, kind: str = "",
                soft_cap: bool = False) -> int:
    """Bytes the scheme holds beyond its operands and outputs: the kept rows' p in x's dtype (under a soft cap their
    float32 logits: `kept_itemsize`) throughout; beside it
    the larger of the forward's and the backward's (dx's float32 accumulator and one step's `STEP_ARRAYS` bytes per
    [rows, columns] entry). The forward's: `LOGITS_HELD` chunks' float32 logits, `P_CHUNKS_OFF_LANES` chunks of p
    where rows are kept at a vocabulary off the lanes, and x by chunks where it is padded or split between the kept
    and the other rows (a copy). On `WEIGHT_COPIED` chips a copy of the weight and of x too, and the forward's and
    backward's arrays beside each other."""
    chunk = chunk_for(rows, layout.chunk)
    padded, width = round_up(rows, chunk), round_up(vocab, LANES)
    kept = kept_itemsize(itemsize, soft_cap)
    forward = LOGITS_HELD * chunk * vocab * 4
    if layout.kept and vocab % LANES:
        forward += P_CHUNKS_OFF_LANES * chunk * width * kept
    if padded != rows or 0 < layout.kept < padded:
        forward += padded * hidden * itemsize
    backward = rows * hidden * 4 + STEP_ARRAYS * rows * columns_for(vocab, layout.columns)
    p = layout.kept * width * kept
    if kind in WEIGHT_COPIED:
        return p + (vocab + rows) * hidden * itemsize + forward + backward
    return p + max(forward, backward)


def _most_kept(rows: int, vocab: int, itemsize: int, hidden: int, budget: int, base: Layout, kind: str) -> int:
    """The most rows (a multiple of the chunk) whose p fits `budget` with what keeping any row adds (`temporaries`
    is linear in the kept rows between none and all; at all, x is not split)."""
    padded = round_up(rows, base.chunk)
    if temporaries(rows, vocab, itemsize, base._replace(kept=padded), hidden, kind) <= budget:
        return padded
    per_chunk = base.chunk * round_up(vocab, LANES) * itemsize
    fixed = temporaries(rows, vocab, itemsize, base._replace(kept=base.chunk), hidden, kind) - per_chunk
    return max(0, min(padded - base.chunk, (budget - fixed) // per_chunk * base.chunk))


def layouts(rows: int, vocab: int, itemsize: int, hidden: int, budget: int, soft_cap: bool = False, kind: str = ""
            ) -> list[Layout]:
    """Per chunk of `CHUNKS` whose temporaries fit `budget` bytes with no row kept, the layout at `step_columns` with
    the most rows kept that still fit (none under a soft cap); and where the rows are one chunk, every row kept and
    one backward step (`WHOLE`; under a soft cap their logits, `KEPT_LOGITS`)."""
    out = []
    columns = step_columns(rows, vocab)
    if 0 < rows <= CHUNKS[0]:  # one chunk: every row kept (under a soft cap its logits), the backward in one step
        whole = Layout(chunk_for(rows, CHUNKS[0]), chunk_for(rows, CHUNKS[0]), columns_for(vocab, vocab))
        if temporaries(rows, vocab, itemsize, whole, hidden, kind, soft_cap) <= budget:  # `WHOLE`, `KEPT_LOGITS`
            out.append(whole)
    for size in CHUNKS:
        chunk = chunk_for(rows, size)
        base = Layout(chunk, 0, columns)
        if temporaries(rows, vocab, itemsize, base, hidden, kind) <= budget:
            kept = 0 if soft_cap else _most_kept(rows, vocab, itemsize, hidden, budget, base, kind)
            out.append(base._replace(kept=kept))
    return list(dict.fromkeys(out))


def layout(rows: int, vocab: int, itemsize: int, on: roofline.Chip, hidden: int, soft_cap: bool = False
           ) -> Layout | None:
    """The layout of least `cost` on `on` among `layouts` within 1/`HBM_SHARE` of its HBM; None where none fits
    (the kernels then: dx's accumulator alone is past the share)."""
    fits = layouts(rows, vocab, itemsize, hidden, on.hbm // HBM_SHARE, soft_cap, on.kind)
    return min(fits, key=lambda lay: cost(rows, hidden, vocab, itemsize, lay, soft_cap=soft_cap).seconds(on),
               default=None)


def check(rows: int, layout: Layout) -> None:
    """Refuse a layout the scheme cannot run, naming what is wrong."""
    padded = round_up(rows, layout.chunk) if layout.chunk > 0 else 0
    if layout.chunk <= 0 or layout.columns <= 0:
        raise ValueError(f"tokamax lm_head: the stored scheme's chunk and columns must be > 0, got {layout}")
    if layout.kept % layout.chunk or not 0 <= layout.kept <= padded:
        raise ValueError(f"tokamax lm_head: the stored scheme keeps a multiple of its chunk ({layout.chunk}) up to "
                         f"{padded} rows, got {layout.kept}")


def smallest(rows: int, vocab: int) -> Layout:
    """The least a call can take: the smallest chunk, no row kept (asked for where no layout fits)."""
    return Layout(chunk_for(rows, CHUNKS[-1]), 0, step_columns(rows, vocab))


def cost(rows: int, hidden: int, vocab: int, itemsize: int, layout: Layout, *, backward: bool = True,
         weight_grad: bool = True, soft_cap: bool = False) -> StoredCost:
    """The forward's roofline, then the backward's (`StoredCost.after`). Forward flops: the logits; bytes: per chunk
    the weight and bias read, x's chunk read, its float32 logits written and read once, p written for the kept rows
    (where there is a backward), six per-row vectors; its statistics over each logit take the kernels' measured
    figure for the same reductions. Backward flops: dx = G @ w, dw = G.T @ x (not for a frozen head) and the logits
    again for the rows not kept; bytes: p read, G in x's dtype written and read by each matmul, the weight read for
    dx and for the logits again, per step dx's float32 accumulator read and written and x read (for dw, and for the
    logits again), those logits written and read in float32, dx written, dw zeroed (where more than one step adds
    into it: in one step its matmul writes it once, `ONE_STEP_DW`) and written, db; over each of its kept row's
    logits `KEPT_SECONDS` of vector work (G from p). p's bytes are `kept_itemsize`'s (a soft cap's float32 logits)."""
    chunk = chunk_for(rows, layout.chunk)
    padded = round_up(rows, chunk)
    again = rows - min(layout.kept, rows)
    w = vocab * hidden * itemsize
    moved = padded // chunk * (w + vocab * 4) + padded * hidden * itemsize + 2 * padded * vocab * 4 + 6 * padded * 4
    temporaries_ = temporaries(rows, vocab, itemsize, layout, hidden, soft_cap=soft_cap)
    after = None
    if backward:
        steps = -(-vocab // columns_for(vocab, layout.columns))
        grads = 2 if weight_grad else 1
        kept = kept_itemsize(itemsize, soft_cap)
        moved += layout.kept * vocab * kept  # p written
        back = layout.kept * vocab * kept + (1 + grads) * rows * vocab * itemsize  # p read; G written, read
        back += w + (w if again else 0) + 2 * again * vocab * 4 + rows * hidden * itemsize
        back += steps * (2 * rows * hidden * 4 + (again + rows * weight_grad) * hidden * itemsize)
        if weight_grad:  # dw zeroed where steps add into it, and written; db
            back += (2 if steps > 1 else 1) * w + vocab * 4
        after = StoredCost(chunk, 2 * (grads * rows + again) * vocab * hidden, back, temporaries_,
                           (rows - again) * vocab, KEPT_SECONDS)
    return StoredCost(chunk, 2 * padded * vocab * hidden, moved, temporaries_, padded * vocab, STATISTICS_SECONDS,
                      after)


def _chunk(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, transform: LogitTransform
           ) -> tuple[tuple[jax.Array, ...], jax.Array]:
    raw = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) + b
    z, _ = transform(raw)
    log_p, lse, entropy = log_softmax(z)
    vocab = z.shape[1]
    target_logit = jnp.take_along_axis(z, jnp.clip(targets, 0, vocab - 1)[:, None], axis=1)[:, 0]
    log_sum_sq = jax.nn.logsumexp(2.0 * log_p, axis=1)
    top1 = (jnp.argmax(z, axis=1) == targets).astype(jnp.float32)  # argmax: the first maximum
    kept = z if transform.tanh else jnp.exp(log_p).astype(x.dtype)  # a soft cap's rows keep z (`KEPT_LOGITS`)
    p = jnp.pad(kept, ((0, 0), (0, round_up(vocab, LANES) - vocab)))
    return (lse, target_logit, entropy, log_sum_sq, jnp.sum(z, axis=1), top1), p


def forward(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, transform: LogitTransform, chunk: int,
            kept: int) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """(lse, target_logit, entropy, log_sum_sq_probs, sum_logits, top1: float32 [rows] each; p [kept, vocab] in x's
    dtype, under a soft cap the float32 logits z: `kept_dtype`) for x [rows, hidden], w [vocab, hidden], b float32
    [vocab], targets int32 [rows] (one outside the vocabulary reads a clipped column: the caller makes its row NaN).
    `kept`: a multiple of `chunk`, at most the rows padded to it."""
    rows, vocab = x.shape[0], w.shape[0]
    padded = round_up(rows, chunk)
    check(rows, Layout(chunk, kept, 1))
    xs = jnp.pad(x, ((0, padded - rows), (0, 0))).reshape(padded // chunk, chunk, x.shape[1])
    ts = jnp.pad(targets.astype(jnp.int32), (0, padded - rows)).reshape(padded // chunk, chunk)

    def keeping(carry: None, inputs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple]:
        return carry, _chunk(inputs[0], w, b[None], inputs[1], transform)

    def dropping(carry: None, inputs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple]:
        return carry, _chunk(inputs[0], w, b[None], inputs[1], transform)[0]

    n = kept // chunk
    parts, p = [], jnp.zeros((0, round_up(vocab, LANES)), kept_dtype(x.dtype, transform.tanh))
    if n:
        _, (vectors, p) = jax.lax.scan(keeping, None, (xs[:n], ts[:n]))
        parts.append(vectors)
        p = p.reshape(kept, -1)
    if n < padded // chunk:
        parts.append(jax.lax.scan(dropping, None, (xs[n:], ts[n:]))[1])
    vectors = [jnp.concatenate([part[i].reshape(-1) for part in parts])[:rows] if parts
               else jnp.zeros((0,), jnp.float32) for i in range(6)]  # no rows: no chunk
    return tuple(vectors), p


def backward(x: jax.Array, w: jax.Array, b: jax.Array, p: jax.Array, lse: jax.Array, targets: jax.Array,
             coefficients: tuple[jax.Array, ...], transform: LogitTransform, columns: int, *,
             weight_grad: bool = True) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(dx in x's dtype, dw in w's dtype, db float32 [vocab]; dw and db None where not `weight_grad`) from `forward`'s
    p (under a soft cap the kept rows' float32 logits), the rows' lse (+inf in rows that add nothing: their p is 0
    whatever their logits) and the per-row (a, b, c, d), float32 [rows] each (0 in rows that add nothing); b float32
    [vocab]."""
    rows, hidden = x.shape
    vocab = w.shape[0]
    kept = min(p.shape[0], rows)
    a, b_, c, d = (v.astype(jnp.float32)[:, None] for v in coefficients)
    t = targets.astype(jnp.int32)[:, None]
    lse_kept, lse_again = lse.astype(jnp.float32)[:kept, None], lse.astype(jnp.float32)[kept:, None]
    scale = transform.pre * transform.post

    def gradient(start: jax.Array | int, width: int, w_step: jax.Array) -> jax.Array:
        """G float32 [rows, width] for the columns from `start`: the kept rows' from p, then the others' from their
        logits computed again."""
        is_target = jax.lax.broadcasted_iota(jnp.int32, (rows, width), 1) + start == t
        rule = jnp.where(is_target, c, 0.0) + d
        parts = []
        if kept and transform.tanh:  # the kept rows' float32 logits z: p and dz/dl exactly from them
            z = jax.lax.dynamic_slice(p, (0, start), (kept, width))
            log_p = z - lse_kept  # -inf in rows that add nothing (lse +inf): p 0, its log taken as 0
            p32 = jnp.exp(log_p)
            log_p = jnp.where(jnp.isfinite(log_p), log_p, 0.0)
            capped = z * (1.0 / transform.post)  # tanh(pre l)
            slope = (1.0 - capped * capped) * (transform.pre * transform.post)
            parts.append((p32 * (a[:kept] + b_[:kept] * log_p) + rule[:kept]) * slope)
        elif kept:
            p32 = jax.lax.dynamic_slice(p, (0, start), (kept, width)).astype(jnp.float32)
            log_p = jnp.where(p32 > 0, jnp.log(jnp.where(p32 > 0, p32, 1.0)), 0.0)
            parts.append((p32 * (a[:kept] + b_[:kept] * log_p) + rule[:kept]) * scale)
        if kept < rows or not kept:  # (no rows at all: an empty G)
            raw = jax.lax.dot_general(x[kept:], w_step, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            z, slope = transform(raw + jax.lax.dynamic_slice(b, (start,), (width,))[None])
            log_p = z - lse_again  # -inf in rows that add nothing (lse +inf): p 0, its log taken as 0
            p32 = jnp.exp(log_p)
            log_p = jnp.where(jnp.isfinite(log_p), log_p, 0.0)
            parts.append((p32 * (a[kept:] + b_[kept:] * log_p) + rule[kept:]) * slope)
        return jnp.concatenate(parts) if len(parts) > 1 else parts[0]

    def step(carry: tuple, start: jax.Array | int, width: int) -> tuple:
        dx, dw, db = carry
        w_step = jax.lax.dynamic_slice(w, (start, 0), (width, hidden))
        g = gradient(start, width, w_step)
        # G made once per step, written in x's dtype beside its column sums: left to itself XLA fuses G's making
        # into each matmul's operand, its logs and exps done twice (the v5e: 62.2 ms against 56.1 with G whole,
        # Qwen3 8B's head at 2,048 rows, benchmarks/measured/v5e-2026-12-05-bench-lm_head_statistics-a65632f.json)
        g_low, db_step = jax.lax.optimization_barrier((g.astype(x.dtype), jnp.sum(g, axis=0)))
        dx = dx + jax.lax.dot_general(g_low, w_step, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        if weight_grad:
            dw_step = jax.lax.dot_general(g_low, x, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            dw = jax.lax.dynamic_update_slice(dw, dw_step.astype(w.dtype), (start, 0))
            db = jax.lax.dynamic_update_slice(db, db_step, (start,))
        return dx, dw, db

    columns = columns_for(vocab, columns)
    steps, rest = divmod(vocab, columns)
    carry = (jnp.zeros((rows, hidden), jnp.float32),
             jnp.zeros((vocab, hidden), w.dtype) if weight_grad else None,
             jnp.zeros((vocab,), jnp.float32) if weight_grad else None)
    if steps:
        carry, _ = jax.lax.scan(lambda cy, s: (step(cy, s, columns), None), carry,
                                jnp.arange(steps, dtype=jnp.int32) * columns)
    if rest:
        carry = step(carry, steps * columns, rest)
    dx, dw, db = carry
    return dx.astype(x.dtype), dw, db
