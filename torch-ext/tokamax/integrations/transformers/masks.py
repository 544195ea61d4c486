"""Segment ids from what transformers hands an attention function with flash-attention masks.

The kernel lets a query see only keys of its own id. Ids: real tokens VALID, padding PAD (padding
then attends only to padding, so no row is empty and no real token sees padding), cache slots not
written yet UNWRITTEN (no query has that id; blocks of them are never read). The ids are the cache op's
(`torch_ops.splash_attention.cache_op`), which derives a cache step's on the device.
"""

from __future__ import annotations

import torch

from ...torch_ops.splash_attention.cache_op import PAD, UNWRITTEN, VALID

__all__ = ["PAD", "UNWRITTEN", "VALID", "packed_ids", "padding_ids"]


def padding_ids(mask: torch.Tensor) -> torch.Tensor:
    """int32 [batch, len] ids of a [batch, len] padding mask (true/1 = token)."""
    return torch.where(mask.bool(), VALID, PAD).to(torch.int32)


def packed_ids(position_ids: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """int32 [batch, len] document ids of packed sequences (position ids restart at each document,
    as transformers' `find_packed_sequence_indices` reads them), or None without 2-D position ids.
    Computed on the device with no host sync: an unpacked batch gets one id throughout."""
    if position_ids is None or position_ids.dim() != 2:
        return None
    position_ids = position_ids.expand(batch, -1)
    steps = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
    return ((steps != 1).cumsum(-1) + VALID).to(torch.int32)
