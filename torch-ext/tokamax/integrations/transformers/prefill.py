"""Attention where the queries and the keys are the same tokens: training steps and prompts (no
cache, or a dynamic cache's first step). The differentiable Torch op, one kernel call per layer for
the batch, the mask offset 0 fixed when tracing; padding and packed documents become segment ids."""

from __future__ import annotations

import torch

from ... import torch_ops
from . import masks


def self_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   position_ids: torch.Tensor | None, *, causal: bool, window: tuple[int | None, int | None] | None,
                   soft_cap: float | None, sinks: torch.Tensor | None) -> torch.Tensor:
    """[batch, heads, len, head_dim]; `mask` a [batch, len] padding mask or None (then position ids
    that restart mark packed documents, as transformers' eager attention reads them)."""
    ids = masks.padding_ids(mask) if mask is not None else masks.packed_ids(position_ids, q.shape[0])
    return torch_ops.splash_attention(q, k, v, causal=causal, window=window, segment_ids=ids, soft_cap=soft_cap,
                                      sinks=sinks)
