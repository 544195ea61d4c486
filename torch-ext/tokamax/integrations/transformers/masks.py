"""Segment ids from what transformers hands an attention function with flash-attention masks.

The kernel lets a query see only keys of its own id. Ids: real tokens VALID, padding PAD (padding
then attends only to padding, so no row is empty and no real token sees padding), cache slots not
written yet UNWRITTEN (no query has that id; blocks of them are never read).
"""

from __future__ import annotations

import torch

VALID, PAD, UNWRITTEN = 1, 2, 0


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


def slot_ids(mask: torch.Tensor | None, written: torch.Tensor, batch: int, kv_len: int) -> torch.Tensor:
    """int32 [batch, kv_len] ids of a cache's slots: UNWRITTEN from `written` (int32 [1], the count of
    slots filled, the queries' included) on, else VALID or PAD by `mask` (its first columns the
    slots'; None: no padding)."""
    slots = torch.arange(kv_len, device=written.device, dtype=torch.int32)
    ids = torch.full((batch, kv_len), VALID, dtype=torch.int32, device=written.device)
    if mask is not None:
        ids[:, : mask.shape[1]] = padding_ids(mask)
    return torch.where(slots[None, :] < written, ids, UNWRITTEN)
