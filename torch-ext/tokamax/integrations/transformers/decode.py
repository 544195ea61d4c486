"""Attention of new tokens against a KV cache (decode steps, chunked prefill, a draft's verification,
a static cache's prompt): the run-time-offset Torch op, so one export serves every step.

- The queries' slot travels as a tensor (`positions.query_offset`), the slots' validity as segment
  ids (`masks.slot_ids`); the kernel reads only KV blocks up to the last query's slot.
- A dynamic cache's keys grow by a token a step; they are padded to `tokamax.splash.bucket(kv_len)`
  slots first (a copy of the cache on the Torch side), so that one export serves every step of a
  bucket. A static cache whose size is a bucket size (any multiple of 128 up to 1024, then of 256,
  512, ... as `bucket` says; e.g. 4096) is used as it is; other sizes are padded the same way.
- The new tokens are padded to `tokamax.splash.query_bucket(q_len)` (a decode step's one token
  stays one), so drafts and chunks of varying length share exports too.
- Forward only (generation runs under no_grad); gradients through a cache step raise.
"""

from __future__ import annotations

import torch

from ... import splash, torch_ops
from . import buckets, masks, positions


def cache_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               position_ids: torch.Tensor | None, *, causal: bool, window: tuple[int | None, int | None] | None,
               soft_cap: float | None, sinks: torch.Tensor | None) -> torch.Tensor:
    """[batch, heads, q_len, head_dim] for q [batch, heads, q_len, head_dim] against the cache's
    k, v [batch, kv_heads, slots, head_dim]; `mask` [batch, <= slots] padding of the slots written."""
    batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
    offset = positions.query_offset(mask, position_ids, q_len, kv_len, q.device)
    kv_ids = masks.slot_ids(mask, offset + q_len, batch, kv_len)
    q_slots = (offset + torch.arange(q_len, device=q.device, dtype=torch.int32)).long().expand(batch, q_len)
    q_ids = kv_ids.gather(1, q_slots)
    slots, rows = splash.bucket(kv_len), splash.query_bucket(q_len)
    k, v, kv_ids = buckets.pad_length(k, slots), buckets.pad_length(v, slots), buckets.pad_key_ids(kv_ids, slots)
    q, q_ids = buckets.pad_length(q, rows), buckets.pad_query_ids(q_ids, rows)
    out = torch_ops.splash_attention(q, k, v, causal=causal, window=window, segment_ids=(q_ids, kv_ids),
                                     q_offset=offset, soft_cap=soft_cap, sinks=sinks)
    return out[:, :, :q_len]
