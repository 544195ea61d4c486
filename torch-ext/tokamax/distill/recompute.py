"""The distillation divergence in plain XLA with its gradient basis Q recomputed by vocabulary chunks in the
backward: the stored scheme's arithmetic without its [rows, vocab] residual.

Why: the stored scheme (`stored`) keeps Q = dDiv/dz_s * dz_s/dl [rows, vocab] in the student's dtype from the
forward, and past an eighth of the chip's HBM (1.95 GiB at 4,096 rows of Gemma 2's 256,000 vocabulary) the rule
takes the kernels, which make both models' logits four times for the JSD (two forward sweeps, dx's kernel, dw's).
Here the forward makes them once and the backward once more: six matmuls (both models' logits twice, dx, dw)
against the stored scheme's four and the kernels' ten (eight for a KL), in XLA's fusions, no [rows, vocab] array
kept.

- `forward`: `stored.forward`'s `lax.scan` over chunks of rows (`chunk`, from `CHUNKS`), the five per-row outputs
  of `kernels.OUTPUTS` only (Q is not made).
- `backward`: given the log-sum-exps and the auxiliary sum (KL(p_s || m) for the JSD, the divergence for a KL), a
  `fori_loop` over `vchunk` vocabulary columns at a time (the columns left after the whole chunks one step more of
  their own width: no weight padded or copied, no column made twice): both models' logits of all rows again, Q as
  `stored.chunk_outputs` makes it per element (rounded once to the student's dtype), then dw_s[chunk] = Q.T @ (g
  x_s) (exact per chunk: nothing accumulates across chunks), db_s[chunk] = sum_r g_r Q_r, and Q @ w_s[chunk]
  added into a float32 [rows, hidden_s] accumulator; dx_s = g times it, rounded once. The roundings are the stored
  scheme's (`stored.backward`): Q once, g x_s once, dx_s and dw_s once each into their dtypes; dx_s's float32 sum
  runs over the chunks in order.

The entropy's gradient is not in Q: `divergence` takes the kernels' backward where the entropy has a cotangent.
`row_chunk` and `choose_chunk` size the two loops so that their temporaries (`cost.recompute`) fit half of the
1/`HBM_SHARE` of the chip's HBM any scheme may take (`SHARE`). "auto" takes this scheme where the stored one's Q
does not fit its share and its roofline is under the kernels' (`choose`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import roofline
from ..lm_head.blocks import round_up
from ..lm_head.cost import HBM_SHARE
from . import cost, stored
from .blocks import Sizes
from .kernels import Setting, log_mixture

CHUNKS = stored.CHUNKS
"""The forward's chunk rows, largest first (the stored scheme's: each chunk re-reads both weights). Measured on the
v5e (JAX 0.10.2) at Gemma 2 2B <- 9B's heads (the JSD, both soft caps 30, bf16), forward and backward at 4,096 rows
with 8,192 columns a step: chunks of 512 220.3 ms, of 1024 224.8, of 256 230.0; at 16,384 rows 872.0 and 890.4 for
512 and 1024. (`MEASURED`)"""
VCHUNKS = (2048, 1024, 512, 256, 128)
"""The backward's vocabulary columns per step, largest first. Each step re-reads both models' hidden states, x_s
again for dw's matmul, and reads and writes dx_s's float32 accumulator (at 4,096 rows of Gemma 2 2B <- 9B in bf16,
143 MB a step: 0.23 of the time of a step's matmuls on the v5e's roofline at 2,048 columns), but XLA streams that
under the matmuls: measured as `CHUNKS` (forward chunks of 512), 2,048 columns a step took 212.5 ms at 4,096 rows
against 214.2 for 4,096 and 220.3 for 8,192; 435.8 against 436.7 (8,192) at 8,192 rows; 865.6 at 16,384 rows against
867.9 (1,024), 876.8 (4,096) and 872.0 (8,192). So none wider than 2,048."""
SHARE = 2 * HBM_SHARE
"""Each phase's temporaries stay within 1/`SHARE` of the chip's HBM: half the share any scheme's temporaries may take
(1/`HBM_SHARE`, the rest the model's), which wider chunks would use for no speed (`CHUNKS`, `VCHUNKS`)."""

__all__ = ["CHUNKS", "HBM_SHARE", "MEASURED", "SHARE", "VCHUNKS", "backward", "basis", "choose", "choose_chunk",
           "forward", "row_chunk"]


def row_chunk(sizes: Sizes, chip: roofline.Chip) -> int:
    """The forward's chunk rows: the largest of `CHUNKS` (`stored.chunk_for`: no more than the rows rounded up to 8)
    whose forward temporaries (`cost.recompute`: both models' float32 logits of a chunk, the per-row vectors) fit
    1/`SHARE` of `chip`'s HBM; else the smallest. Gemma 2 2B <- 9B's heads on the 16 GiB v5e: 512 (1.05 GB)."""
    chunks = [stored.chunk_for(sizes.rows, c) for c in CHUNKS]
    return next((c for c in chunks if cost.recompute(sizes, VCHUNKS[-1], chunk=c).forward_bytes
                 <= chip.hbm // SHARE), chunks[-1])


def choose_chunk(sizes: Sizes, chip: roofline.Chip) -> int:
    """The backward's vocabulary columns per step: the largest of `VCHUNKS` whose backward temporaries
    (`cost.recompute`: `cost.RECOMPUTE_LOGITS` float32 [rows, columns] arrays, Q's columns in the student's dtype,
    dx_s's float32 accumulator, the per-row vectors) fit 1/`SHARE` of `chip`'s HBM; else the smallest. Gemma 2 2B <-
    9B's heads in bf16 on the 16 GiB v5e: 2,048 columns up to 32,768 rows (0.35 GB at 16,384), 1,024 at 65,536."""
    return next((v for v in VCHUNKS if cost.recompute(sizes, v, chunk=CHUNKS[-1]).backward_bytes
                 <= chip.hbm // SHARE), VCHUNKS[-1])


def choose(sizes: Sizes, chip: roofline.Chip, setting: Setting | None = None) -> tuple[int, int] | None:
    """(the forward's chunk rows, the backward's columns per step) where "auto" takes this scheme, else None: some
    rows, and its roofline (`cost.recompute` at those chunks) under the kernels' (`stored.kernels_seconds`), or the
    kernels unable to take these hidden sizes. `divergence`'s rule asks it where the stored scheme's Q does not fit
    (`stored.choose` None). On the v5e at Gemma 2 2B <- 9B's heads (JSD, both soft caps 30, bf16) this scheme ran
    at 0.65x the kernels' time at 4,096 rows (212.5 against 326.4 ms) and 16,384 (865.6 against 1,299.7), with
    first calls of 2.4-5 s against their 8.7-9.5 (`MEASURED`); the roofline says 227 against 359 and 909 against
    1,437."""
    if sizes.rows < 1:
        return None
    chunk, vchunk = row_chunk(sizes, chip), choose_chunk(sizes, chip)
    kernels = stored.kernels_seconds(sizes, chip, setting)
    if kernels is None or cost.recompute(sizes, vchunk, chunk=chunk).seconds(chip) < kernels:
        return chunk, vchunk
    return None


MEASURED = "v5e-2026-12-07-distill-recompute.json"
"""The v5e's run of this scheme beside the kernels, the stored scheme and XLA's plain program (benchmarks/measured)."""


def forward(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
            setting: Setting, chunk: int) -> tuple[jax.Array, ...]:
    """The five per-row outputs of `kernels.OUTPUTS`, float32 [rows] each, over chunks of `chunk` rows (the rows
    padded with zeros to a multiple, the padding's outputs dropped). Biases float32 [vocab]."""
    rows = xs.shape[0]
    padded = round_up(rows, chunk)

    def chunks(x: jax.Array) -> jax.Array:
        return jnp.pad(x, ((0, padded - rows), (0, 0))).reshape(padded // chunk, chunk, x.shape[1])

    def step(carry: None, inputs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple]:
        vectors, _ = stored.chunk_outputs(setting, xs.dtype, inputs[0], ws, bs[None], inputs[1], wt, bt[None])
        return carry, vectors  # Q made and dropped: XLA removes its arithmetic

    _, vectors = jax.lax.scan(step, None, (chunks(xs), chunks(xt)))
    return tuple(v.reshape(padded)[:rows] for v in vectors)


def _logits(x: jax.Array, w: jax.Array, b: jax.Array, transform) -> tuple[jax.Array, jax.Array]:  # noqa: ANN001
    raw = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) + b[None]
    return transform(raw)


def basis(setting: Setting, dtype: jnp.dtype, zs: jax.Array, dz: jax.Array, zt: jax.Array, lse_s: jax.Array,
          lse_t: jax.Array, aux: jax.Array) -> jax.Array:
    """Q of some columns, in `dtype`: `stored.chunk_outputs`'s per element, from both models' transformed logits
    z_s (with dz_s/dl) and z_t of those columns and the forward's per-row log-sum-exps and auxiliary sum."""
    log_ps, log_pt = zs - lse_s[:, None], zt - lse_t[:, None]
    ps = jnp.exp(log_ps)
    if setting.kind == "forward_kl":
        q = ps - jnp.exp(log_pt)
    elif setting.kind == "reverse_kl":
        q = ps * (log_ps - log_pt - aux[:, None])
    else:
        q = (1.0 - setting.beta) * ps * (log_ps - log_mixture(log_ps, log_pt, setting.beta) - aux[:, None])
    return (q * dz).astype(dtype)


def backward(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
             setting: Setting, saved: tuple[jax.Array, jax.Array, jax.Array], g: jax.Array, vchunk: int, *,
             weight_grad: bool = True) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """(dx_s in x_s's dtype, dw_s in w_s's dtype or None where not `weight_grad`, db_s float32 [vocab]) of the
    divergence's cotangent `g` [rows]; `saved`: the forward's (student's lse, teacher's lse, auxiliary sum), float32
    [rows] each. Biases float32 [vocab]."""
    vocab = ws.shape[0]
    width = min(vchunk, vocab)
    whole = vocab // width
    lse_s, lse_t, aux = saved
    g = g.astype(jnp.float32)
    gx = (g[:, None] * xs.astype(jnp.float32)).astype(xs.dtype)  # dw's other operand, rounded once

    def step(start, width: int, carry: tuple) -> tuple:  # noqa: ANN001 - start: an int or a traced int32
        dx, dw, db = carry
        cols = (lambda a: jax.lax.dynamic_slice_in_dim(a, start, width))  # noqa: E731
        w_s = cols(ws)
        zs, dz = _logits(xs, w_s, cols(bs), setting.student)
        zt, _ = _logits(xt, cols(wt), cols(bt), setting.teacher)
        q = basis(setting, xs.dtype, zs, dz, zt, lse_s, lse_t, aux)
        dx = dx + jax.lax.dot_general(q, w_s, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        db = jax.lax.dynamic_update_slice_in_dim(db, jnp.sum(g[:, None] * q.astype(jnp.float32), axis=0), start, 0)
        if weight_grad:
            part = jax.lax.dot_general(q, gx, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            dw = jax.lax.dynamic_update_slice_in_dim(dw, part.astype(ws.dtype), start, 0)
        return dx, dw, db

    carry = (jnp.zeros(xs.shape, jnp.float32), jnp.zeros(ws.shape, ws.dtype) if weight_grad else None,
             jnp.zeros((vocab,), jnp.float32))
    carry = jax.lax.fori_loop(0, whole, lambda i, c: step(i * width, width, c), carry)
    if whole * width < vocab:  # the columns left: one step of their own width
        carry = step(whole * width, vocab - whole * width, carry)
    dx, dw, db = carry
    return (g[:, None] * dx).astype(xs.dtype), dw, db
