"""One training step of an LM head three ways, as JAX functions of (x, w, targets) -> (dx, dw), so that
the TPU compiler reports each one's per-chip memory for the same chip:

- `ours`: this kernel's `lm_head.statistics` (Pallas; no [tokens, vocabulary] array);
- `trl_tiles`: what TRL's `ChunkedLogProbFunction` does off CUDA (DESIGN §13): tiles of 4,096 tokens x
  32,768 vocabulary, online log-sum-exp and entropy, each token tile recomputed in the backward;
- `transformers_logits`: what transformers' loss does: the whole logits in the model's dtype, then
  float32 log-softmax.

Each gives the gradients of the summed negative log-probability in x and w, and each row's entropy
(what SFT logs).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

TRL_TOKEN_TILE, TRL_VOCAB_TILE = 4096, 32768


def ours(kernel: ModuleType) -> Callable[..., Any]:
    def loss(x: jax.Array, w: jax.Array, targets: jax.Array) -> jax.Array:
        b = jnp.zeros((w.shape[0],), jnp.float32)
        s = kernel.lm_head.statistics(x, w, b, targets, scheme="kernels")  # the kernels, whatever the default
        return jnp.sum(s.lse - s.target_logit), s.entropy
    return jax.grad(loss, argnums=(0, 1), has_aux=True)


def _vocab_tiles(vocab: int) -> tuple[int, int]:
    """TRL's vocabulary tile (or the whole vocabulary) and how many: the last is read where it ends
    (the vocabulary rarely divides by the tile), the columns an earlier tile covered masked."""
    width = min(TRL_VOCAB_TILE, vocab)
    return width, -(-vocab // width)


def _logits(x: jax.Array, w: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Vocabulary tile `i`'s float32 logits (columns of earlier tiles at -inf), first column, its columns."""
    width, _ = _vocab_tiles(w.shape[0])
    start = jnp.minimum(i * width, w.shape[0] - width)
    w_tile = jax.lax.dynamic_slice_in_dim(w, start, width)
    columns = start + jnp.arange(width)
    z = jnp.where(columns[None, :] >= i * width, (x @ w_tile.T).astype(jnp.float32), -jnp.inf)
    return z, start, columns


def _forward(x: jax.Array, w: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One token tile: online max, sum exp, sum exp*z and the target logit over the vocabulary tiles."""
    rows = x.shape[0]

    def step(i: jax.Array, carry: tuple) -> tuple:
        m, s, sz, target = carry
        z, _, columns = _logits(x, w, i)
        new_m = jnp.maximum(m, z.max(axis=1))
        e, scale = jnp.exp(z - new_m[:, None]), jnp.exp(m - new_m)
        hit = columns[None, :] == targets[:, None]
        return (new_m, s * scale + e.sum(axis=1), sz * scale + jnp.where(e > 0, e * z, 0.0).sum(axis=1),
                target + jnp.where(hit & (e > 0), z, 0.0).sum(axis=1))

    zeros = jnp.zeros((rows,), jnp.float32)
    m, s, sz, target = jax.lax.fori_loop(0, _vocab_tiles(w.shape[0])[1], step,
                                         (jnp.full((rows,), -jnp.inf, jnp.float32), zeros, zeros, zeros))
    lse = m + jnp.log(s)
    return target - lse, lse - sz / s, lse  # log-probabilities, entropy, log-sum-exp


@jax.custom_vjp
def _chunked_log_probs(x: jax.Array, w: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    log_probs, entropy, _ = _by_token_tiles(x, w, targets)
    return log_probs, entropy


def _by_token_tiles(x: jax.Array, w: jax.Array, targets: jax.Array) -> tuple[jax.Array, ...]:
    tiles = x.shape[0] // TRL_TOKEN_TILE
    out = jax.lax.map(lambda a: _forward(a[0], w, a[1]), (x.reshape(tiles, TRL_TOKEN_TILE, x.shape[1]),
                                                          targets.reshape(tiles, TRL_TOKEN_TILE)))
    return tuple(o.reshape(-1) for o in out)


def _chunked_fwd(x: jax.Array, w: jax.Array, targets: jax.Array) -> tuple:
    log_probs, entropy, lse = _by_token_tiles(x, w, targets)
    return (log_probs, entropy), (x, w, targets, lse)


def _chunked_bwd(residuals: tuple, cotangents: tuple) -> tuple:
    """The log-probabilities' gradient (TRL's entropy output passes none under SFT), tile by tile with the
    logits recomputed; dW accumulated in float32, as TRL's backward."""
    x, w, targets, lse = residuals
    g = cotangents[0]
    dw = jnp.zeros(w.shape, jnp.float32)

    def token_tile(t: jax.Array, dw: jax.Array) -> tuple[jax.Array, jax.Array]:
        rows = jax.lax.dynamic_slice_in_dim(x, t * TRL_TOKEN_TILE, TRL_TOKEN_TILE)
        tgt, row_lse, row_g = (jax.lax.dynamic_slice_in_dim(a, t * TRL_TOKEN_TILE, TRL_TOKEN_TILE)
                               for a in (targets, lse, g))

        def vocab_tile(i: jax.Array, carry: tuple) -> tuple:
            dx, dw = carry
            z, start, columns = _logits(rows, w, i)
            hit = (columns[None, :] == tgt[:, None]) & (z > -jnp.inf)  # a column an earlier tile counted: no
            dz = row_g[:, None] * (hit - jnp.exp(z - row_lse[:, None]))
            width = z.shape[1]
            dx = dx + dz @ jax.lax.dynamic_slice_in_dim(w, start, width).astype(jnp.float32)
            dw = jax.lax.dynamic_update_slice_in_dim(
                dw, jax.lax.dynamic_slice_in_dim(dw, start, width) + dz.T @ rows.astype(jnp.float32), start, 0)
            return dx, dw

        dx, dw = jax.lax.fori_loop(0, _vocab_tiles(w.shape[0])[1], vocab_tile,
                                   (jnp.zeros(rows.shape, jnp.float32), dw))
        return dx, dw

    def body(dw: jax.Array, t: jax.Array) -> tuple:
        dx, dw = token_tile(t, dw)
        return dw, dx

    dw, dx = jax.lax.scan(body, dw, jnp.arange(x.shape[0] // TRL_TOKEN_TILE))
    return dx.reshape(x.shape).astype(x.dtype), dw.astype(w.dtype), None


_chunked_log_probs.defvjp(_chunked_fwd, _chunked_bwd)


def trl_tiles(kernel: ModuleType) -> Callable[..., Any]:
    del kernel

    def loss(x: jax.Array, w: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
        log_probs, entropy = _chunked_log_probs(x, w, targets)
        return -jnp.sum(log_probs), entropy
    return jax.grad(loss, argnums=(0, 1), has_aux=True)


def transformers_logits(kernel: ModuleType) -> Callable[..., Any]:
    del kernel

    def loss(x: jax.Array, w: jax.Array, targets: jax.Array) -> jax.Array:
        logits = (x @ w.T).astype(jnp.float32)  # the model's dtype, upcast for the loss
        log_p = jax.nn.log_softmax(logits, axis=-1)
        entropy = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
        return -jnp.sum(jnp.take_along_axis(log_p, targets[:, None], axis=1)), entropy
    return jax.grad(loss, argnums=(0, 1), has_aux=True)


HEADS = {"ours (tokamax.lm_head)": ours, "TRL's tiles (4096 x 32768, recomputed)": trl_tiles,
         "transformers' logits (float32 loss)": transformers_logits}
