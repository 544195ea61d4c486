"""`splash_cache_op`: a KV cache step (decode, a chunk, a draft) in one program, from what transformers
hands an attention function: the new tokens' q, the cache's k and v, its [batch, slots] padding mask or
the position ids. The step's bookkeeping (the queries' slot, each slot's segment id, the query rows' ids,
the scaling of q) runs in the op's own JAX program beside the kernel (`splash.attend_at`).

Why one program: torch-tpu runs each eager Torch op as a launch of its own, and a decode step's attention
is a few kilobytes of work. Built from eager ops (an offset, an arange, two `where`s, a gather, the ids'
padding, a scaling) the bookkeeping was about 19 launches per layer and token around one kernel call,
where transformers' eager attention makes about 10. What stays eager is what must: padding k, v and the
mask to the bucket the export serves (their length changes every step of a dynamic cache).

Slot ids (`VALID`, `PAD`, `UNWRITTEN`): real tokens 1, padding 2 (padding attends only to padding, so no
row is empty and no real token sees padding), slots not written yet 0 (no query has that id; blocks of
them are never read). `lengths` int32 [4] = (kv_len, q_len, mask_cols, source): the keys transformers
handed over before padding, the new tokens before padding, the mask's columns before padding (the first
mask_cols slots'; 0 without a mask), and what says where the queries sit (`FROM_MASK`: the last columns
written, up to the last one any row attends to and at least q_len (a step's new tokens are attended to; a
static cache's mask comes padded to the cache's length, `cache_masks`, so that its shape is the same every
step; a chunk or draft whose last tokens are padding in every row would be placed before that padding: generation
pads on the left); `FROM_POSITION`:
the first position id, capped at kv_len - q_len, since a full window cache is rolled; `LAST`: the last
keys, kv_len - q_len). The mask and the first position are always tensors (a stand-in where transformers
gave none, never read), so that a step with a mask and one without share one export.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ... import splash
from .._bridge import chip_for_tracing, register
from .custom_ops import spec

__all__ = ["FROM_MASK", "FROM_POSITION", "LAST", "PAD", "UNWRITTEN", "VALID", "splash_cache_op"]

VALID, PAD, UNWRITTEN = 1, 2, 0
FROM_MASK, FROM_POSITION, LAST = 0, 1, 2  # lengths[3]


def slot_ids(mask: jax.Array, first_position: jax.Array, lengths: jax.Array, batch: int, slots: int
             ) -> tuple[jax.Array, jax.Array]:
    """(the queries' first slot, int32 [1]; the slots' ids, int32 [batch, slots]), as the module docstring says."""
    kv_len, q_len, mask_cols, source = lengths[0], lengths[1], lengths[2], lengths[3]
    slot = jnp.arange(slots, dtype=jnp.int32)[None, :]
    # the slots written: up to the last column any row attends to (a step's new tokens are attended to), so a
    # mask padded past the written slots (a static cache's, at the cache's length) places them the same way; at
    # least the new tokens (a prompt right-padded in every row still starts at slot 0)
    written = jnp.maximum(jnp.max(jnp.where((mask != 0) & (slot < mask_cols), slot + 1, 0)), q_len)
    offset = jnp.where(source == FROM_MASK, written - q_len,
                       jnp.where(source == FROM_POSITION, jnp.minimum(first_position.reshape(-1)[0], kv_len - q_len),
                                 kv_len - q_len))
    ids = jnp.where(slot < mask_cols, jnp.where(mask != 0, VALID, PAD), VALID)
    ids = jnp.where(slot < offset + q_len, ids, UNWRITTEN).astype(jnp.int32)
    return offset.reshape(1).astype(jnp.int32), jnp.broadcast_to(ids, (batch, slots))


@chip_for_tracing()
def _cache_jax(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, first_position: jax.Array,
               lengths: jax.Array, sinks: jax.Array | None, causal: bool, window_left: int, window_right: int,
               soft_cap: float, scale: float) -> jax.Array:
    """out [batch, heads, rows, head_dim_v] for q [batch, heads, rows, head_dim] (unscaled; rows >= q_len,
    padded rows ask what the last query asks) against k, v [batch, kv_heads, slots, head_dim]."""
    batch, rows, slots = q.shape[0], q.shape[2], k.shape[2]
    offset, kv_ids = slot_ids(mask, first_position, lengths, batch, slots)
    row_slot = offset[0] + jnp.minimum(jnp.arange(rows, dtype=jnp.int32), lengths[1] - 1)
    q_ids = jnp.take_along_axis(kv_ids, jnp.broadcast_to(row_slot, (batch, rows)), axis=1)
    q = (q.astype(jnp.float32) * scale).astype(q.dtype)  # as Torch's q * scale: float32 math, one rounding
    return splash.attend_at(q, k, v, q_ids, kv_ids, offset, sinks, spec=spec(causal, window_left, window_right),
                            soft_cap=soft_cap if soft_cap > 0 else None)


splash_cache_op = register("splash_attention_cache", _cache_jax)


@splash_cache_op.register_fake
def _cache_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                first_position: torch.Tensor, lengths: torch.Tensor, sinks: torch.Tensor | None, causal: bool,
                window_left: int, window_right: int, soft_cap: float, scale: float) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], v.shape[-1]))
