"""The divergence as the loss of a step, its gradients made in the forward: where the weights of the per-token
divergences are known before the backward (TRL's DistillationTrainer: the completion mask over `num_items_in_batch`
or the valid tokens), d(loss)/d(z_s) = weight_r Q_r is known as soon as a row's two softmaxes are, so one pass over
chunks of rows gives the loss and dx_s, dw_s and db_s, and the backward only scales them by the loss's cotangent.
They are held unrounded from the forward to the backward (dx_s float32, dw_s's accumulator as it stands: `exact`)
and rounded once after the cotangent scales them, as the labels path's (`lm_head.fused.Pending`): rounded to bf16 in
the forward and again when scaled (a loss over n tokens, gradient accumulation's loss / n), some entries took the
neighbouring value. That holds dx_s's float32 bytes where its bf16 ones were, and the pair's int8 low half beside
its high half, dw_s (or the float32 accumulator where dw_s was): at 8,192 rows of Qwen2.5 0.5B's head (896,
vocabulary 151,936) on the v5e, in chunks of 768 (the pair), 438,371,840 bytes where the rounded gradients took
287,557,120 (dx_s 14,680,064 and the low half 136,134,656 more).

Per chunk of rows: both models' float32 logits (two matmuls), the divergence, the student's entropy and Q as the
stored scheme makes them (`stored`), G = weight Q rounded once to the student's dtype (TRL's one rounding), dx_s = G
@ w_s (one matmul) and dw_s += G.T @ x_s (one matmul), added by `lm_head.accumulate`'s kernel where it takes the
student's head (the accumulator streamed under the matmul) into the pair the labels path keeps (`lm_head.fused`:
high in w_s's 16-bit dtype, the low half in int8, 3 bytes an entry where float32 takes 4), else by XLA into a
float32 accumulator. Four matmuls, as
the loss written plainly and as the stored scheme, with no [rows, vocab] array beyond one chunk's: the stored scheme
keeps Q for every row (2.5 GB at 8,192 rows and a vocabulary of 151,936) and past an eighth of the chip's HBM the
per-token call falls back to the kernels (six matmuls); this holds one chunk's logits, G and the [vocab, hidden_s]
accumulator at any number of rows.

`choose` (the rule): the largest chunk of `CHUNKS` whose temporaries (`temporaries`) fit 1/`HBM_SHARE` of the
chip's HBM, at the least roofline time (`cost`). The rows left after the whole chunks run as one more chunk
(`lm_head.fused.TAIL_ROWS`). Rows that are one chunk add dw_s by XLA, not the kernel (`held_pair`, `ONE_CHUNK`).
`loss_chunk` (the loss's scheme): this one where it adds dw_s without the pair, else the per-token call's stored
scheme where that fits (`PAIR_SLOWER`), else this one with the pair.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .. import roofline
from ..lm_head import accumulate
from ..lm_head.blocks import round_up
from ..lm_head.cost import HBM_SHARE
from ..lm_head.fused import SMALL_BUFFERS, TAIL_ROWS, Pending, chunk_rows
from . import stored
from .blocks import Sizes
from .cost import STORED_VECTOR_SECONDS
from .kernels import Setting, sizes_of
from .stored import chunk_outputs

CHUNKS = tuple(range(2048, 255, -256))
"""Chunk rows, largest first: every multiple of 256 from 256 to 2048 (each chunk re-reads both weights: at 256
rows a chunk's matmuls are already HBM-bound on the v5e)."""
F32 = 4
ONE_CHUNK = "v5e-2026-12-07-zoo-shard6of56-6c78e5c.json"
"""The record (benchmarks/measured/) of the rule before it left one chunk to XLA: at 256 rows (one chunk of 256) dw_s
was added by `accumulate`'s kernel into the pair, zeroed first and finished after, around a single addition: the loss
forward and backward took 10.82 ms against XLA's 7.96 at Qwen3 1.7B <- Qwen3 8B's heads (vocabulary 151,936), and
7.86 against 6.45 at Qwen3 0.6B's, where the per-token stored scheme's divergence took 7.40 and 5.83 (XLA's 7.82 and
6.34). In one chunk XLA's dw_s matmul writes dw_s once in its dtype, the cotangent's scale and the rounding fused into
it, as the labels path's one chunk (`lm_head.fused.ONE_CHUNK`, which the v5e ran at XLA's time)."""
PAIR_SLOWER = "v5e-2026-12-07-zoo-prefill-distill-stats-256-1024-44d0773.json"
"""The record (with its 128 and 512 rows twin) of the zoo's distillation at a prefill's rows on the v5e, the loss's
rule before `loss_chunk`: where the fused scheme added dw_s by `accumulate`'s pair (more than one chunk, or one
chunk whose float32 dw_s would not fit the share: Gemma 2 2B <- 9B's and Gemma 3 1B <- 4B's heads at any of these
rows) its forward and backward took 1.17-1.62x XLA's loss (27.97 against 22.34 ms at 1,024 rows of Qwen3 1.7B <- 8B;
15.98 against 10.46 at 128 rows of Gemma 2 2B <- 9B), where the per-token call's stored scheme took 0.96-1.06x
(23.73, 10.02), as at 4,096 rows before (v5e-2026-12-05-bench-attention-lm_head-distill-286717f.json: 94.09 against
the fused chunks' 99.94-101.27, XLA 91.88). Where the fused scheme's one chunk adds dw_s by XLA's matmul it was the
fastest of the three (6.97 against 7.41 and XLA's 7.86 at 256 rows of Qwen3 1.7B <- 8B). The roofline does not see
the pair's cost (it puts the two at equal time at 1,024 rows), so the rule says it, not the cost model."""
CHUNK_TEMPORARIES = 3
"""[chunk, vocab] float32 arrays a chunk holds at once: both models' logits and what XLA makes of them before G is
written in the student's dtype."""

__all__ = ["CHUNKS", "FusedCost", "choose", "cost", "loss", "loss_and_grads", "loss_chunk", "temporaries"]


@dataclasses.dataclass(frozen=True)
class FusedCost:
    chunk: int
    flops: int
    bytes_accessed: int
    temp_bytes: int
    logits: int  # both models' logits computed, for the vector work beyond the roofline
    kernel: bool  # dW added by `accumulate`'s kernel into the pair, its low half in int8

    def seconds(self, on: roofline.Chip) -> float:
        serial = self.logits * roofline.scaled(STORED_VECTOR_SECONDS, on)
        return roofline.seconds(self.flops, self.bytes_accessed, 0, on, serial=serial)


def _accumulator(sizes: Sizes, kernel: bool, weight_grad: bool) -> int:
    """dw_s's accumulator bytes: the pair's int8 low half with the kernel (its high half is dw_s, the output), else
    float32."""
    return sizes.vocab * sizes.student_hidden * (1 if kernel else F32) if weight_grad else 0


def temporaries(sizes: Sizes, chunk: int, kernel: bool, weight_grad: bool = True) -> int:
    """dw_s's accumulator (where the student's head trains), `CHUNK_TEMPORARIES` float32 [chunk, vocab] arrays, G in
    the student's dtype, dx_s and the per-row vectors."""
    rows = chunk_rows(sizes.rows, chunk)[1]
    return (_accumulator(sizes, kernel, weight_grad) + chunk * sizes.vocab * (CHUNK_TEMPORARIES * F32
            + sizes.student_itemsize) + rows * (sizes.student_hidden * sizes.student_itemsize + 2 * F32))


def cost(sizes: Sizes, chunk: int, *, kernel: bool = True, weight_grad: bool = True) -> FusedCost:
    """Per chunk: both weights read by the logits' matmuls and w_s by dx's, the chunk's hidden states, both models'
    float32 logits written and read once, G written once and read by dx's and dw's matmuls; the float32 accumulator
    read and written per chunk (written only by the first: 3 bytes an entry in the kernel's pair, 4 in XLA's float32);
    the kernel's traffic streamed under its matmul, XLA's counted the same. One chunk that XLA adds into: dw_s's
    matmul writes it once in w_s's dtype (`ONE_CHUNK`)."""
    chunks, rows = chunk_rows(sizes.rows, chunk)
    hs, ht = sizes.student_hidden * sizes.student_itemsize, sizes.teacher_hidden * sizes.teacher_itemsize
    g = sizes.vocab * sizes.student_itemsize
    per_row = hs + ht + 2 * 2 * sizes.vocab * F32 + 3 * g + hs + 2 * F32
    accumulator = sizes.vocab * sizes.student_hidden * (3 if kernel else F32) if weight_grad else 0
    written = sizes.vocab * hs if chunks == 1 and weight_grad and not kernel else accumulator
    moved = chunks * sizes.vocab * (2 * hs + ht + 2 * F32) + rows * per_row + (2 * chunks - 2) * accumulator + written
    flops = 2 * rows * sizes.vocab * (sizes.student_hidden + sizes.teacher_hidden) \
        + (2 if weight_grad else 1) * 2 * rows * sizes.vocab * sizes.student_hidden
    return FusedCost(chunk, flops, moved, temporaries(sizes, chunk, kernel, weight_grad), 2 * rows * sizes.vocab,
                     kernel)


def kernel_takes(chunk: int, hidden: int, vocab: int, itemsize: int, vmem: int) -> bool:
    """Whether `accumulate`'s kernel can add dw_s into the pair at this chunk: a 16-bit student whose head it takes
    beside the chunk in `vmem` bytes."""
    return itemsize == 2 and accumulate.fits(chunk, hidden, vocab, itemsize, vmem)


def held_pair(sizes: Sizes, chunk: int, chip: roofline.Chip, weight_grad: bool = True) -> bool:
    """Whether `loss_and_grads` (no `accumulator_kernel` given) adds dw_s by `accumulate`'s kernel into the pair, its
    low half int8, else into a float32 accumulator: where the kernel takes the head (`kernel_takes`) and the rows are
    more than one chunk, or in one chunk where XLA's float32 dw_s would not fit 1/`HBM_SHARE` of the chip's HBM. In
    one chunk there is nothing to add to: XLA's dw_s matmul writes it (`ONE_CHUNK`). What `exact` leaves, for the
    Torch ops' fakes."""
    if not weight_grad or not kernel_takes(chunk, sizes.student_hidden, sizes.vocab, sizes.student_itemsize,
                                           chip.vmem):
        return False
    if chunk_rows(sizes.rows, chunk)[0] > 1:
        return True
    return temporaries(sizes, chunk, False, weight_grad) + SMALL_BUFFERS > chip.hbm // HBM_SHARE


def choose(sizes: Sizes, chip: roofline.Chip, weight_grad: bool = True) -> int | None:
    """The chunk of least roofline time among `CHUNKS` (no larger than the rows rounded to the smallest) whose
    temporaries and `SMALL_BUFFERS` fit 1/`HBM_SHARE` of the chip's HBM; among equals the larger. None where none
    fits (a student's float32 accumulator past the share)."""
    costs = [cost(sizes, c, kernel=held_pair(sizes, c, chip, weight_grad), weight_grad=weight_grad) for c in CHUNKS
             if c <= round_up(sizes.rows, CHUNKS[-1])]
    fitting = [c for c in costs if c.temp_bytes + SMALL_BUFFERS <= chip.hbm // HBM_SHARE]
    return min(fitting, key=lambda c: (c.seconds(chip), -c.chunk)).chunk if fitting else None


def loss_chunk(sizes: Sizes, chip: roofline.Chip, setting: Setting | None = None, weight_grad: bool = True
               ) -> int | None:
    """The loss's scheme (`distill.loss`'s and the Torch op's "auto"): `choose`'s chunk where the fused scheme adds
    dw_s without `accumulate`'s pair (`held_pair`: one chunk, XLA's matmul writing dw_s; or no dw_s at all); else
    None, the per-token call weighted, where its stored scheme fits (`stored.choose`); else `choose`'s chunk with
    the pair (Q past the share: the fused scheme's one chunk of memory is what runs). Measured (`PAIR_SLOWER`)."""
    chunk = choose(sizes, chip, weight_grad)
    if chunk is not None and not held_pair(sizes, chunk, chip, weight_grad):
        return chunk
    return None if stored.choose(sizes, chip, setting) is not None else chunk


def loss_and_grads(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
                   weights: jax.Array, setting: Setting, chunk: int, *, weight_grad: bool = True,
                   accumulator_kernel: bool | None = None, exact: bool = False
                   ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, accumulate.Accumulator | None,
                              jax.Array | None]:
    """(sum_r weights_r divergence_r float32 [], divergence and entropy float32 [rows], dx_s in x_s's dtype, dw_s in
    w_s's dtype and db_s float32 [vocab], or None for both where not `weight_grad`). Biases float32 [vocab] (zeros for
    none). `accumulator_kernel` None: the rule's (`held_pair`: the kernel where it takes the student's head and
    there is more than one chunk); True: `accumulate`'s kernel into the pair where it takes the head at this chunk
    (`kernel_takes`), even in one; False: XLA's float32 accumulator. `exact`: dx_s float32 and dw_s's
    accumulator as it stands (float32, or the pair), for a cotangent to scale before their one rounding
    (`accumulate.finish`; the Torch ops)."""
    rows, vocab, hidden = xs.shape[0], ws.shape[0], xs.shape[1]
    on = roofline.chip()
    if accumulator_kernel is None:
        kernel = held_pair(sizes_of(xs, xt, vocab), chunk, on, weight_grad)
    else:
        kernel = accumulator_kernel and kernel_takes(chunk, hidden, vocab, xs.dtype.itemsize, on.vmem)
    weights = weights.astype(jnp.float32)
    whole = rows // chunk * chunk

    def step(carry: tuple, inputs: tuple) -> tuple:
        x_s, x_t, m = inputs
        (div, entropy, *_), q = chunk_outputs(setting, jnp.float32, x_s, ws, bs[None], x_t, wt, bt[None])
        g = m[:, None] * q  # a weight of 0 (a masked or padding row) gives none
        g_low = g.astype(xs.dtype)
        dx = jax.lax.dot_general(g_low, ws, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        if weight_grad:
            dw, db = carry
            carry = (accumulate.add(dw, g_low, x_s, kernel), db + jnp.sum(g, axis=0))
        return carry, (jnp.sum(m * div), div, entropy, dx if exact else dx.astype(xs.dtype))

    zeros = accumulate.start(ws.shape, ws.dtype, kernel, kernel)  # the kernel's pair, int8 low; else float32
    carry = (zeros, jnp.zeros((vocab,), jnp.float32)) if weight_grad else ()
    losses, rows_out = [], []  # per part (the whole chunks, the rows left): the weighted sum; (div, entropy, dx)
    if whole:
        def chunks(a: jax.Array) -> jax.Array:
            return a[:whole].reshape(whole // chunk, chunk, *a.shape[1:])
        carry, (part, *per_row) = jax.lax.scan(step, carry, (chunks(xs), chunks(xt), chunks(weights)))
        losses.append(jnp.sum(part))
        rows_out.append([o.reshape(whole, *o.shape[2:]) for o in per_row])
    if whole < rows:
        extra = round_up(rows - whole, TAIL_ROWS) - (rows - whole)

        def tail(a: jax.Array) -> jax.Array:
            return jnp.pad(a[whole:], ((0, extra),) + ((0, 0),) * (a.ndim - 1))
        carry, (part, *per_row) = step(carry, (tail(xs), tail(xt), tail(weights)))
        losses.append(part)
        rows_out.append([o[:rows - whole] for o in per_row])
    if not rows_out:  # no rows
        losses.append(jnp.zeros((), jnp.float32))
        rows_out.append([jnp.zeros((0,), jnp.float32), jnp.zeros((0,), jnp.float32),
                         jnp.zeros(xs.shape, jnp.float32 if exact else xs.dtype)])
    div, entropy, dx = (jnp.concatenate(o) if len(o) > 1 else o[0] for o in zip(*rows_out, strict=True))
    loss = sum(losses[1:], losses[0])
    if not weight_grad:
        return loss, div, entropy, dx, None, None
    dw, db = carry
    return loss, div, entropy, dx, dw if exact else accumulate.finish(dw, ws.dtype), db


def _primal(x: Any) -> Any:
    return x.value if isinstance(x, jax.custom_derivatives.CustomVJPPrimal) else x


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _loss(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
          weights: jax.Array, setting: Setting, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    return loss_and_grads(xs, ws, bs, xt, wt, bt, weights, setting, chunk, weight_grad=False)[:3]


def _loss_fwd(*primals: Any) -> tuple[tuple, tuple]:
    """The gradients in the forward, held unrounded (`exact`: dx_s float32, dw_s's accumulator as the scheme left
    it) until the backward knows the loss's cotangent (`_pending`): dw_s and db_s only where the student's weight or
    bias is perturbed (a frozen head, LoRA's, makes dx_s alone)."""
    xs, ws, bs, xt, wt, bt, weights = (_primal(p) for p in primals[:7])
    setting, chunk = primals[7:]
    weight_grad = any(getattr(p, "perturbed", True) for p in primals[1:3])
    loss, div, entropy, dx, dw, db = loss_and_grads(xs, ws, bs, xt, wt, bt, weights, setting, chunk,
                                                    weight_grad=weight_grad, exact=True)
    zeros = tuple(jnp.zeros_like(a) for a in (xt, wt, bt, weights))
    return (loss, div, entropy), (_pending(dx, dw, db, xs, ws, bs), zeros)


def _pending(dx: jax.Array, dw: accumulate.Accumulator | None, db: jax.Array | None, xs: jax.Array, ws: jax.Array,
             bs: jax.Array) -> Pending:
    """`loss_and_grads`' `exact` gradients as `lm_head.fused.Pending`: `pending(scale)` gives dx_s in x_s's dtype,
    dw_s in w_s's and db_s in b_s's times the loss's cotangent `scale` (float32 []), each rounded once (dw_s by
    `accumulate.finish`); zeros for dw_s and db_s where they were not made. Scaling gradients already rounded to
    bf16 rounded them twice where the cotangent is not a power of two (a loss over n, gradient accumulation)."""
    x_dtype, w_shape, w_dtype, b_shape, b_dtype = xs.dtype, ws.shape, ws.dtype, bs.shape, bs.dtype

    def finish(dx, dw, db, scale):  # noqa: ANN001, ANN202 - the closure holds no array (the pytree's static part)
        if dw is None:
            return (dx * scale).astype(x_dtype), jnp.zeros(w_shape, w_dtype), jnp.zeros(b_shape, b_dtype)
        return (dx * scale).astype(x_dtype), accumulate.finish(dw, w_dtype, scale), (db * scale).astype(b_dtype)

    return Pending(finish, dx, dw, db)


def _loss_bwd(setting: Setting, chunk: int, residuals: tuple, cotangents: tuple) -> tuple:
    pending, zeros = residuals
    d_loss, d_div, d_entropy = cotangents
    taken = [name for name, d in (("divergence", d_div), ("entropy", d_entropy)) if not isinstance(d, SymbolicZero)]
    if taken:
        raise ValueError(f"tokamax distill.loss: a gradient through the per-token {' and '.join(taken)} was asked "
                         "for, but the loss's gradients are made in the forward for its weights alone; "
                         "differentiate the loss, or take distill.divergence for per-token gradients")
    if isinstance(d_loss, SymbolicZero):  # zeros of the gradients' shapes and dtypes (nothing of them computed)
        return *(jnp.zeros_like(g) for g in pending(jnp.float32(1))), *zeros
    # the forward's float32 dx_s and dw_s's accumulator times the cotangent, rounded once (`_pending`)
    return *pending(d_loss.astype(jnp.float32)), *zeros


_loss.defvjp(_loss_fwd, _loss_bwd, symbolic_zeros=True)


def loss(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
         weights: jax.Array, setting: Setting, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum_r weights_r divergence_r float32 [], divergence and entropy float32 [rows]), differentiable in x_s, w_s
    and b_s through the loss alone (its gradients made in the forward, held unrounded and rounded once after the
    loss's cotangent scales them); biases float32 [vocab]."""
    return _loss(xs, ws, bs, xt, wt, bt, weights, setting, chunk)
