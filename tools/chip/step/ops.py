"""The two sets of ops a step runs with: the package's, and the best a JAX user has without it."""

from __future__ import annotations

from types import ModuleType

import jax
import jax.numpy as jnp

from ..workloads.attention import jax_splash
from .decoder import Ops

HEAD_CHUNK = 4096
"""Rows per chunk of the baseline's chunked head (its logits recomputed in the backward)."""


def tokamax(tk: ModuleType) -> Ops:
    """`tokamax.splash.attend` (the package's blocks), `tokamax.ops.ragged_dot` (its tiles), `tokamax.lm_head.loss`
    (the labels path, its scheme)."""
    def attention(q: jax.Array, k: jax.Array, v: jax.Array, window: int | None) -> jax.Array:
        spec = tk.splash.MaskSpec.of(True, None if window is None else (window - 1, 0))
        return tk.splash.attend(q, k, v, None, None, None, spec=spec)[0]

    def head(x: jax.Array, w: jax.Array, targets: jax.Array, weights: jax.Array) -> jax.Array:
        return tk.lm_head.loss.loss(x, w, targets, weights)

    return Ops(attention, tk.ops.ragged_dot, head)


def _cross_entropy(x: jax.Array, w: jax.Array, targets: jax.Array, weights: jax.Array) -> jax.Array:
    z = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    lse = jax.nn.logsumexp(z, axis=1)
    return jnp.sum(weights * (lse - jnp.take_along_axis(z, targets[:, None], axis=1)[:, 0]))


def _chunked_cross_entropy(x: jax.Array, w: jax.Array, targets: jax.Array, weights: jax.Array) -> jax.Array:
    """Over chunks of `HEAD_CHUNK` rows, each chunk's logits recomputed in the backward (`jax.checkpoint`)."""
    rows = x.shape[0]
    chunk = min(HEAD_CHUNK, rows)
    if rows % chunk:
        raise ValueError(f"step baseline head: {rows} rows are not a multiple of {chunk}")
    per_chunk = jax.checkpoint(_cross_entropy)

    def body(total: jax.Array, c: tuple) -> tuple[jax.Array, None]:
        return total + per_chunk(c[0], w, c[1], c[2]), None

    split = (x.reshape(-1, chunk, x.shape[1]), targets.reshape(-1, chunk), weights.reshape(-1, chunk))
    return jax.lax.scan(body, jnp.zeros((), jnp.float32), split)[0]


def _jax_attention(q: jax.Array, k: jax.Array, v: jax.Array, window: int | None) -> jax.Array:
    return jax_splash(512, window)(q, k, v)


def jax_best(chunked_head: bool) -> Ops:
    """JAX's bundled splash kernel at 512 blocks with its fused backward (MaxText's choice), `jax.lax.ragged_dot`,
    and XLA's head: its float32 logits materialized, or (`chunked_head`) chunked and rematerialized."""
    return Ops(_jax_attention, jax.lax.ragged_dot, _chunked_cross_entropy if chunked_head else _cross_entropy)
