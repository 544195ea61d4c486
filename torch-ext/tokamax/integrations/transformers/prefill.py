"""Attention where the queries and the keys are the same tokens, causal (or a causal or two-sided
window): training steps and prompts (no cache, or a dynamic cache's first step). The differentiable
Torch op, one kernel call per layer for the batch, the mask offset 0 fixed when tracing; padding and
packed documents become segment ids; the length is padded to `tokamax.splash.padded` first, so
that one export serves every length up to the next 128 (or 1024) tokens."""

from __future__ import annotations

import torch

from ... import splash, torch_ops
from . import buckets, masks


def self_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   position_ids: torch.Tensor | None, *, causal: bool, window: tuple[int | None, int | None] | None,
                   soft_cap: float | None, sinks: torch.Tensor | None) -> torch.Tensor:
    """[batch, heads, len, head_dim]; `mask` a [batch, len] padding mask or None (then position ids
    that restart mark packed documents, as transformers' flash attention reads them)."""
    batch, length = q.shape[0], q.shape[2]
    ids = masks.padding_ids(mask) if mask is not None else masks.packed_ids(position_ids, batch)
    padded = splash.padded(length)
    if padded != length:
        if ids is None:
            ids = torch.full((batch, length), masks.VALID, dtype=torch.int32, device=q.device)
        q, k, v = (buckets.pad_length(x, padded) for x in (q, k, v))
        ids = (buckets.pad_query_ids(ids, padded), buckets.pad_key_ids(ids, padded))
    out = torch_ops.splash_attention(q, k, v, causal=causal, window=window, segment_ids=ids, soft_cap=soft_cap,
                                     sinks=sinks)
    return out[:, :, :length]
