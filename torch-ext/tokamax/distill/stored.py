"""The distillation divergence in plain XLA with a stored gradient basis: four matmuls, as the loss written
plainly, in bounded memory.

Per row r the divergence's gradient to the student's raw logits is its cotangent g_r times a row Q_r the
forward can compute (the package docstring's d/dz_s, without g_r, times dz_s/dl): Q = (p_s - p_t) dz (beta
0), p_s (log p_s - log p_t - KL) dz (beta 1), (1 - beta) p_s (log p_s - log m - KL(p_s || m)) dz (between).

- `forward`: a `lax.scan` over chunks of `chunk` rows (the rows padded with zeros to a multiple; the padding's
  outputs dropped): per chunk both models' float32 logits (two matmuls in the operands' dtype, float32 out),
  the divergence, the student's entropy, both log-sum-exps and the auxiliary sum (the kernels' five per-row
  outputs, `kernels.OUTPUTS`), and Q in the student's dtype into a [padded rows, vocab] residual. No chunk
  holds more than its own [chunk, vocab] logits.
- `backward`: dx_s = g * (Q @ w_s) and dw_s = Q.T @ (g * x_s), float32 accumulation, two matmuls with no
  loop; db_s = sum_r g_r Q_r in float32. Rounding: TRL rounds G = g Q to the student's dtype once before its
  matmuls; here Q is rounded once (the same relative error, g being a per-row scalar) and dx is scaled by g in
  float32 after the matmul, so dx has TRL's one rounding; dw's other operand g * x_s is rounded to the
  student's dtype too (one more rounding of the same size; rounding g * Q instead would cost the same and a
  pass over [rows, vocab]). Float32 operands: Q is float32, no rounding beyond float32's. A frozen head (no
  cotangent for w_s): dw's matmul is an output nobody reads and XLA drops it (`tests/jax/distill/test_stored`
  counts the compiled program's matmuls); db's reduction likewise where there is no bias.

The entropy's gradient is not in Q; `divergence` takes the kernels' backward where the entropy has a cotangent.

`choose` (the rule): the largest chunk of `CHUNKS` whose temporaries (`cost.stored`: Q, the per-row vectors
and the chunk's float32 logits) fit 1/`HBM_SHARE` of the chip's HBM, at any number of rows (`PREFILL`), where
its roofline beats the kernels'; else None (the kernels). `tools.chip bench` times both ("tokamax (stored)",
"tokamax (kernels)") beside the package's choice ("tokamax") and XLA's plain loss.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import roofline
from ..lm_head.blocks import round_up
from ..lm_head.cost import HBM_SHARE
from ..lm_head.softmax import log_softmax
from . import blocks, cost
from .blocks import Sizes
from .kernels import Setting, log_mixture

CHUNKS = (1024, 512, 256)
"""Chunk rows, largest first: each chunk re-reads both weights (1.9 GB at student 2048, teacher 4096, vocabulary
151,936 in bf16), so at 256 rows a chunk's two matmuls are already HBM-bound on the v5e (3.2 ms of reading
against 2.9 of matmul) and smaller chunks only lose."""
PREFILL = "v5e-2026-12-07-zoo-shard6of56-6c78e5c.json"
"""Fewer rows than one smallest chunk run as one chunk of their own, as any other count (`chunk_for`: the rows rounded
up to 8, no chunk's padding): the kernels took them before, for fewer rows than 256, with no measurement behind it.
At 256 rows the v5e ran this scheme faster than XLA's plain program (this record: 7.40 against 7.82 ms, the JSD
forward and backward at Qwen3 1.7B <- 8B's heads, 5.83 against 6.34 at Qwen3 0.6B's); at 128 the v5e's compiler
(libtpu 0.0.52, compile-only) gives the kernels 6.51 GB moved and 882 GFLOP (their backward makes the logits again)
against this scheme's 4.18 GB and 399 (XLA's program: 4.22 and 401), and the roofline puts it at 6.0 ms against the
kernels' 14.4."""

__all__ = ["CHUNKS", "HBM_SHARE", "backward", "bias", "choose", "chunk_for", "forward", "kernels_seconds"]


def bias(b: jax.Array | None, vocab: int) -> jax.Array:
    """A model's bias as the schemes take it: float32 [vocab], zeros where the head has none."""
    return jnp.zeros((vocab,), jnp.float32) if b is None else b.astype(jnp.float32)


def chunk_for(rows: int, chunk: int) -> int:
    """`chunk` capped at the rows rounded up to 8 (one chunk, barely padded, for fewer rows)."""
    return min(chunk, round_up(rows, 8))


def choose(sizes: Sizes, chip: roofline.Chip, setting: Setting | None = None) -> int | None:
    """The stored scheme's chunk, or None for the kernels. The rule: some rows (`PREFILL`); the largest chunk of
    `CHUNKS` whose temporaries (`cost.stored`'s: Q at rows x vocab in the student's dtype, the per-row vectors, one
    chunk's float32 logits of both models) fit 1/`HBM_SHARE` of `chip`'s HBM (the LM head's rule: the rest is the
    model's); and its roofline (`cost.stored`) faster than the kernels' (`cost.costs` at their blocks for `chip`,
    `setting`'s beta and soft caps; the JSD's without one), unless the kernels cannot take these hidden sizes at
    all. Else None. At 4,096 rows, student 2048, teacher 4096, vocabulary 151,936, bf16, on the 16 GiB v5e: Q
    1.16 GiB, chunks of 512 (1024's logits do not fit beside it), 77 ms by the roofline against the kernels' 218
    (measured: 198); at 16,384 rows the kernels (Q alone 4.6 GiB)."""
    if sizes.rows < 1:
        return None
    chunk = next((c for c in (chunk_for(sizes.rows, c) for c in CHUNKS)
                  if cost.stored(sizes, c).temp_bytes <= chip.hbm // HBM_SHARE), None)
    if chunk is None:
        return None
    kernels = kernels_seconds(sizes, chip, setting)
    return chunk if kernels is None or cost.stored(sizes, chunk).seconds(chip) < kernels else None


def kernels_seconds(sizes: Sizes, chip: roofline.Chip, setting: Setting | None = None) -> float | None:
    """The kernels' roofline (`cost.costs` at their blocks for `chip`, `setting`'s beta and soft caps; the JSD's
    without one), None where their smallest blocks cannot take these hidden sizes: what a plain-XLA scheme is
    weighed against."""
    beta, caps = (0.5, 0) if setting is None else (setting.beta, setting.soft_caps)
    try:
        by = {k: blocks.choose(sizes, chip.vmem, k) for k in blocks.KERNELS}
    except ValueError:  # hidden sizes the kernels' smallest blocks do not fit
        return None
    return sum(c.seconds(chip) for c in cost.costs(sizes, by, beta=beta, soft_caps=caps).values())


def _logits(x: jax.Array, w: jax.Array, b: jax.Array, transform) -> tuple[jax.Array, jax.Array]:  # noqa: ANN001
    raw = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) + b
    return transform(raw)


def chunk_outputs(setting: Setting, dtype: jnp.dtype, xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array,
                  wt: jax.Array, bt: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """One chunk's five per-row outputs and its Q in `dtype` (the fused scheme weighs it in float32 first)."""
    zs, dz = _logits(xs, ws, bs, setting.student)
    zt, _ = _logits(xt, wt, bt, setting.teacher)
    (log_ps, lse_s, entropy), (log_pt, lse_t, _) = log_softmax(zs), log_softmax(zt)
    ps, pt = jnp.exp(log_ps), jnp.exp(log_pt)
    beta = setting.beta
    if setting.kind == "forward_kl":
        div = jnp.sum(pt * (log_pt - log_ps), axis=1)
        aux, q = div, ps - pt
    elif setting.kind == "reverse_kl":
        div = jnp.sum(ps * (log_ps - log_pt), axis=1)
        aux, q = div, ps * (log_ps - log_pt - div[:, None])
    else:
        log_m = log_mixture(log_ps, log_pt, beta)
        aux = jnp.sum(ps * (log_ps - log_m), axis=1)  # KL(p_s || m)
        div = beta * jnp.sum(pt * (log_pt - log_m), axis=1) + (1.0 - beta) * aux
        q = (1.0 - beta) * ps * (log_ps - log_m - aux[:, None])
    return (div, entropy, lse_s, lse_t, aux), (q * dz).astype(dtype)


def forward(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
            setting: Setting, chunk: int) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """(the five per-row outputs of `kernels.OUTPUTS`, float32 [rows] each; Q [rows padded to `chunk`, vocab]
    in the student's dtype, its padding rows finite). Biases float32 [vocab]."""
    rows, vocab = xs.shape[0], ws.shape[0]
    padded = round_up(rows, chunk)

    def chunks(x: jax.Array) -> jax.Array:
        return jnp.pad(x, ((0, padded - rows), (0, 0))).reshape(padded // chunk, chunk, x.shape[1])

    def step(carry: None, inputs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple]:
        return carry, chunk_outputs(setting, xs.dtype, inputs[0], ws, bs[None], inputs[1], wt, bt[None])

    _, (vectors, q) = jax.lax.scan(step, None, (chunks(xs), chunks(xt)))
    return tuple(v.reshape(padded)[:rows] for v in vectors), q.reshape(padded, vocab)


def backward(xs: jax.Array, ws: jax.Array, q: jax.Array, g: jax.Array, *, weight_grad: bool = True
             ) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """(dx_s in x_s's dtype, dw_s in w_s's dtype or None where not `weight_grad`, db_s float32 [vocab]) of the
    divergence's cotangent `g` [rows] from `forward`'s Q."""
    rows = xs.shape[0]
    g = jnp.pad(g.astype(jnp.float32), (0, q.shape[0] - rows))  # the padding's rows add nothing
    x = jnp.pad(xs, ((0, q.shape[0] - rows), (0, 0)))
    dx = jax.lax.dot_general(q, ws, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    dx = (g[:, None] * dx)[:rows].astype(xs.dtype)
    db = jnp.sum(g[:, None] * q.astype(jnp.float32), axis=0)
    if not weight_grad:
        return dx, None, db
    gx = (g[:, None] * x.astype(jnp.float32)).astype(xs.dtype)
    dw = jax.lax.dot_general(q, gx, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return dx, dw.astype(ws.dtype), db
