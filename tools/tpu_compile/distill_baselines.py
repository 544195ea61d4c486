"""One DistillationTrainer loss step's divergence two ways, as JAX functions of (x_s, w_s, x_t, w_t) ->
(dx_s, dw_s), so that the TPU compiler reports each one's per-chip memory for the same chip:

- `ours`: this kernel's `distill.divergence` on its kernels (`scheme="kernels"`: Pallas; neither model's
  [tokens, vocabulary] array);
- `trl_tiles`: what TRL's `ChunkedDivergenceFunction` does off CUDA (DESIGN §16): tiles of 4,096 tokens
  x 32,768 vocabulary of both models, float32; a first sweep of online log-sum-exps (and the student's
  entropy sums), a second for the generalized JSD and KL(p_s || m); the backward recomputes both tiles
  and accumulates dx and dw in float32 (dw a float32 array the weight's size, as TRL's).

Both give the gradients of the summed JSD (beta 0.5, temperature 1, no bias, scale or soft cap) in the
student's hidden states and weight, and each row's entropy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from . import baselines

BETA = 0.5


def ours(kernel: ModuleType) -> Callable[..., Any]:
    def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple[jax.Array, jax.Array]:
        div, entropy = kernel.distill.divergence(xs, ws, None, xt, wt, None, beta=BETA, scheme="kernels")
        return jnp.sum(div), entropy
    return jax.grad(loss, argnums=(0, 1), has_aux=True)


def _tile(x: jax.Array, w: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Vocabulary tile `i`'s float32 logits, its first column and whether each column is this tile's (the
    last tile is read where it ends; columns an earlier tile covered are not its)."""
    width, _ = baselines._vocab_tiles(w.shape[0])
    start = jnp.minimum(i * width, w.shape[0] - width)
    mine = (start + jnp.arange(width))[None, :] >= i * width
    z = jax.lax.dot_general(x, jax.lax.dynamic_slice_in_dim(w, start, width), (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32)
    return z, start, mine


def _log_m(log_ps: jax.Array, log_pt: jax.Array) -> jax.Array:
    return jnp.logaddexp(log_ps + math.log1p(-BETA), log_pt + math.log(BETA))


def _forward(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple[jax.Array, ...]:
    """One token tile: both models' online log-sum-exps and the student's entropy, then the JSD sweep."""
    rows, tiles = xs.shape[0], baselines._vocab_tiles(ws.shape[0])[1]
    zeros, minus = jnp.zeros((rows,), jnp.float32), jnp.full((rows,), -jnp.inf, jnp.float32)

    def first(i: jax.Array, carry: tuple) -> tuple:
        (ms, ss, sz), (mt, st) = carry
        zs, _, mine = _tile(xs, ws, i)
        zt, _, _ = _tile(xt, wt, i)
        zs, zt = jnp.where(mine, zs, -jnp.inf), jnp.where(mine, zt, -jnp.inf)
        new_s, new_t = jnp.maximum(ms, zs.max(1)), jnp.maximum(mt, zt.max(1))
        es, et = jnp.exp(zs - new_s[:, None]), jnp.exp(zt - new_t[:, None])
        a_s, a_t = jnp.exp(ms - new_s), jnp.exp(mt - new_t)
        return ((new_s, ss * a_s + es.sum(1), sz * a_s + jnp.where(mine, es * zs, 0.0).sum(1)),
                (new_t, st * a_t + et.sum(1)))

    (ms, ss, sz), (mt, st) = jax.lax.fori_loop(0, tiles, first, ((minus, zeros, zeros), (minus, zeros)))
    lse_s, lse_t = ms + jnp.log(ss), mt + jnp.log(st)

    def second(i: jax.Array, carry: tuple) -> tuple:
        jsd, kl = carry
        zs, _, mine = _tile(xs, ws, i)
        zt, _, _ = _tile(xt, wt, i)
        log_ps, log_pt = zs - lse_s[:, None], zt - lse_t[:, None]
        log_m = _log_m(log_ps, log_pt)
        kl_s = jnp.where(mine, jnp.exp(log_ps) * (log_ps - log_m), 0.0)
        terms = BETA * jnp.where(mine, jnp.exp(log_pt) * (log_pt - log_m), 0.0) + (1 - BETA) * kl_s
        return jsd + terms.sum(1), kl + kl_s.sum(1)

    jsd, kl = jax.lax.fori_loop(0, tiles, second, (zeros, zeros))
    return jsd, lse_s - sz / ss, lse_s, lse_t, kl


def _by_token_tiles(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple[jax.Array, ...]:
    tile = baselines.TRL_TOKEN_TILE
    tiles = xs.shape[0] // tile
    out = jax.lax.map(lambda a: _forward(a[0], ws, a[1], wt),
                      (xs.reshape(tiles, tile, -1), xt.reshape(tiles, tile, -1)))
    return tuple(o.reshape(-1) for o in out)


@jax.custom_vjp
def _chunked_divergence(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple[jax.Array, jax.Array]:
    jsd, entropy, *_ = _by_token_tiles(xs, ws, xt, wt)
    return jsd, entropy


def _fwd(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple:
    jsd, entropy, lse_s, lse_t, kl = _by_token_tiles(xs, ws, xt, wt)
    return (jsd, entropy), (xs, ws, xt, wt, lse_s, lse_t, kl)


def _bwd(residuals: tuple, cotangents: tuple) -> tuple:
    """The JSD's gradient tile by tile with both models' logits recomputed; dx and dw in float32."""
    xs, ws, xt, wt, lse_s, lse_t, kl = residuals
    g = cotangents[0]

    def token_tile(t: jax.Array, dw: jax.Array) -> tuple[jax.Array, jax.Array]:
        rows_s, rows_t, row_lse_s, row_lse_t, row_kl, row_g = (
            jax.lax.dynamic_slice_in_dim(a, t * baselines.TRL_TOKEN_TILE, baselines.TRL_TOKEN_TILE)
            for a in (xs, xt, lse_s, lse_t, kl, g))

        def vocab_tile(i: jax.Array, carry: tuple) -> tuple:
            dx, dw = carry
            zs, start, mine = _tile(rows_s, ws, i)
            zt, _, _ = _tile(rows_t, wt, i)
            log_ps, log_pt = zs - row_lse_s[:, None], zt - row_lse_t[:, None]
            dz = (1 - BETA) * jnp.exp(log_ps) * (log_ps - _log_m(log_ps, log_pt) - row_kl[:, None])
            dz = jnp.where(mine, row_g[:, None] * dz, 0.0).astype(xs.dtype)
            width = dz.shape[1]
            w_tile = jax.lax.dynamic_slice_in_dim(ws, start, width)
            dx = dx + jnp.dot(dz, w_tile, preferred_element_type=jnp.float32)
            dw = jax.lax.dynamic_update_slice_in_dim(
                dw, jax.lax.dynamic_slice_in_dim(dw, start, width)
                + jax.lax.dot_general(dz, rows_s, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32),
                start, 0)
            return dx, dw

        return jax.lax.fori_loop(0, baselines._vocab_tiles(ws.shape[0])[1], vocab_tile,
                                 (jnp.zeros(rows_s.shape, jnp.float32), dw))

    def body(dw: jax.Array, t: jax.Array) -> tuple:
        dx, dw = token_tile(t, dw)
        return dw, dx

    dw, dx = jax.lax.scan(body, jnp.zeros(ws.shape, jnp.float32), jnp.arange(xs.shape[0] // baselines.TRL_TOKEN_TILE))
    return dx.reshape(xs.shape).astype(xs.dtype), dw.astype(ws.dtype), None, None


_chunked_divergence.defvjp(_fwd, _bwd)


def trl_tiles(kernel: ModuleType) -> Callable[..., Any]:
    del kernel

    def loss(xs: jax.Array, ws: jax.Array, xt: jax.Array, wt: jax.Array) -> tuple[jax.Array, jax.Array]:
        jsd, entropy = _chunked_divergence(xs, ws, xt, wt)
        return jnp.sum(jsd), entropy
    return jax.grad(loss, argnums=(0, 1), has_aux=True)


HEADS = {"tokamax distill": ours, "TRL's tiles": trl_tiles}
