"""Attention without a causal mask or a window: encoders and cross-attention (a decoder's queries
against an encoder's keys), any q_len and kv_len. Every query is a real token (a cross-attention
query sits opposite no particular key), so queries see every key the padding mask keeps; the
differentiable Torch op with a full mask, both lengths padded to export buckets."""

from __future__ import annotations

import torch

from ... import splash, torch_ops
from . import buckets, masks


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *,
                   soft_cap: float | None, sinks: torch.Tensor | None) -> torch.Tensor:
    """[batch, heads, q_len, head_dim]; `mask` a [batch, kv_len] padding mask of the keys or None."""
    batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
    q_pad, kv_pad = splash.padded(q_len), splash.padded(kv_len)
    ids = None
    if mask is not None or (q_pad, kv_pad) != (q_len, kv_len):
        q_ids = torch.full((batch, q_pad), masks.VALID, dtype=torch.int32, device=q.device)
        kv_ids = torch.full((batch, kv_len), masks.VALID, dtype=torch.int32, device=q.device)
        if mask is not None:
            kv_ids = torch.where(mask.bool(), masks.VALID, masks.UNWRITTEN).to(torch.int32)
        ids = (q_ids, buckets.pad_key_ids(kv_ids, kv_pad))
    q = buckets.pad_length(q, q_pad)
    k, v = buckets.pad_length(k, kv_pad), buckets.pad_length(v, kv_pad)
    out = torch_ops.splash_attention(q, k, v, causal=False, segment_ids=ids, soft_cap=soft_cap, sinks=sinks)
    return out[:, :, :q_len]
