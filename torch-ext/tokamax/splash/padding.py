"""Padding a splash call to the lengths the kernel takes (`lengths.padded`), and cutting it back.

Rows appended to q take the last query's segment id (their outputs are dropped), keys appended to
k and v an id below every given one, so no real query sees them and blocks of them are never
scheduled. Without segment ids and with lengths the blocks divide, nothing is added.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .lengths import padded


def pad(x: jax.Array, axis: int, length: int, value: Any = 0) -> jax.Array:
    """`x` padded with `value` at the end of `axis` to `length` (no op when it has that length)."""
    axis %= x.ndim
    if x.shape[axis] == length:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


def cut(x: jax.Array, axis: int, length: int) -> jax.Array:
    """`x` cut to `length` along `axis` (no op when it has that length)."""
    return x if x.shape[axis] == length else jax.lax.slice_in_dim(x, 0, length, axis=axis % x.ndim)


def segments(q_ids: jax.Array | None, kv_ids: jax.Array | None, batch: int, q_len: int, kv_len: int
              ) -> tuple[jax.Array, jax.Array] | None:
    """[batch, padded q_len], [batch, padded kv_len] ids, or None where none are needed."""
    q_pad, kv_pad = padded(q_len), padded(kv_len)
    if q_ids is None:
        if (q_pad, kv_pad) == (q_len, kv_len):
            return None
        q_ids, kv_ids = jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, kv_len), jnp.int32)
    if q_pad != q_len:
        q_ids = jnp.concatenate([q_ids, jnp.broadcast_to(q_ids[:, -1:], (batch, q_pad - q_len))], axis=1)
    if kv_pad != kv_len:
        kv_ids = pad(kv_ids, 1, kv_pad, jnp.minimum(q_ids.min(), kv_ids.min()) - 1)
    return q_ids, kv_ids
