"""Batched splash attention at a mask offset fixed when tracing: upstream's Mosaic splash Op and its
VJP Op (`_fwd`, as upstream's custom VJP runs them) with upstream's lazy mask and their own config
choice, one kernel call (`jax.vmap`) for the whole batch, any length (`padding`).

Shapes: q [batch, heads, q_len, head_dim]; k, v [batch, kv_heads, kv_len, head_dim] (kv_heads
dividing heads: grouped-query attention) or [batch, kv_len, head_dim] (multi-query); segment ids
int32 [batch, q_len] and [batch, kv_len] (a query sees only keys of its own id); sinks float32
[heads]. No scaling: scale q first. Without segment ids and with lengths the blocks divide, the call
is upstream's kernel-level call exactly (`tests/jax/splash` compares the whole modules).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from . import _upstream, padding
from .lengths import padded
from .masks import MaskSpec


def attend(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
           sinks: jax.Array | None, *, spec: MaskSpec, offset: int = 0, soft_cap: float | None = None
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(out [batch, heads, q_len, head_dim_v], max_logits and logsumexp [batch, heads, q_len]) with
    the lazy mask `spec`, query i at KV position offset + i."""
    batch, _, q_len, _ = q.shape
    kv_len, mqa = k.shape[-2], k.ndim == 3
    ids = padding.segments(q_ids, kv_ids, batch, q_len, kv_len)
    q_p = padding.pad(q, 2, padded(q_len))
    k_p, v_p = padding.pad(k, -2, padded(kv_len)), padding.pad(v, -2, padded(kv_len))
    shape = (q_p.shape[2], k_p.shape[-2])
    mask, stand_in = spec.lazy(shape, offset), spec.stand_in(shape, offset)
    op = _upstream.forward_op()

    def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: Any) -> tuple[jax.Array, ...]:
        args = _upstream.op_arguments(ids, sinks, mqa, soft_cap)
        config = _upstream.bind_as_public(op, stand_in, q, k, v, **args, return_residuals=True).default_config
        out, (max_logits, lse) = op._fwd(q, k, v, mask=mask, **args, return_residuals=True, config=config)
        return out, max_logits, lse

    out, max_logits, lse = jax.vmap(one, in_axes=(0, 0, 0, None if ids is None else 0))(q_p, k_p, v_p, ids)
    return padding.cut(out, 2, q_len), padding.cut(max_logits, 2, q_len), padding.cut(lse, 2, q_len)


def attend_vjp(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
               sinks: jax.Array | None, out: jax.Array, max_logits: jax.Array, lse: jax.Array, dout: jax.Array, *,
               spec: MaskSpec, offset: int = 0, soft_cap: float | None = None
               ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """(dq, dk, dv, dsinks or None) of `attend` from its residuals. Padded query rows carry no
    cotangent and a logsumexp of +inf (so exp(logit - lse) = 0 there): they add nothing."""
    batch, _, q_len, _ = q.shape
    kv_len, mqa = k.shape[-2], k.ndim == 3
    ids = padding.segments(q_ids, kv_ids, batch, q_len, kv_len)
    q_pad = padded(q_len)
    q_p, out_p, dout_p = (padding.pad(x, 2, q_pad) for x in (q, out, dout.astype(out.dtype)))
    max_p, lse_p = padding.pad(max_logits, 2, q_pad), padding.pad(lse, 2, q_pad, jnp.inf)
    k_p, v_p = padding.pad(k, -2, padded(kv_len)), padding.pad(v, -2, padded(kv_len))
    shape = (q_pad, k_p.shape[-2])
    mask, stand_in = spec.lazy(shape, offset), spec.stand_in(shape, offset)
    op = _upstream.vjp_op()

    def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: Any, out: jax.Array, max_logits: jax.Array,
            lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, ...]:
        args = _upstream.op_arguments(ids, sinks, mqa, soft_cap)
        residuals = (max_logits, lse)
        config = op.bind(residuals, out, dout, q, k, v, mask=stand_in, **args).default_config
        grads, _ = op._fwd(residuals, out, dout, q, k, v, mask=mask, **args, config=config)
        return grads["q"], grads["k"], grads["v"], grads.get("sinks")

    dq, dk, dv, dsinks = jax.vmap(one, in_axes=(0, 0, 0, None if ids is None else 0, 0, 0, 0, 0))(
        q_p, k_p, v_p, ids, out_p, max_p, lse_p, dout_p)
    dq, dk, dv = padding.cut(dq, 2, q_len), padding.cut(dk, -2, kv_len), padding.cut(dv, -2, kv_len)
    return dq, dk, dv, None if dsinks is None else dsinks.sum(0)
