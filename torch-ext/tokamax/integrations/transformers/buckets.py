"""Padding on the Torch side, before the op: torch-tpu exports the op once per distinct tensor shape,
so lengths that change from call to call (prompt and training lengths, a dynamic cache's keys, a
step's new tokens) are padded to buckets (`tokamax.splash`'s `padded`, `bucket`, `query_bucket`)
and the padding masked by segment ids. The kernel pads to its blocks anyway; doing it here costs no
more and lets one export serve every length of a bucket."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import masks


def pad_length(x: torch.Tensor, length: int) -> torch.Tensor:
    """[batch, heads, n, dim] padded with zeros to `length` tokens."""
    return x if x.shape[2] == length else F.pad(x, (0, 0, 0, length - x.shape[2]))


def pad_query_ids(ids: torch.Tensor, length: int) -> torch.Tensor:
    """[batch, n] query ids padded to `length`: padded queries ask what the last one asks."""
    if ids.shape[1] == length:
        return ids
    return torch.cat([ids, ids[:, -1:].expand(-1, length - ids.shape[1])], dim=1)


def pad_key_ids(ids: torch.Tensor, length: int) -> torch.Tensor:
    """[batch, n] key ids padded to `length` with UNWRITTEN, which no query has."""
    return ids if ids.shape[1] == length else F.pad(ids, (0, length - ids.shape[1]), value=masks.UNWRITTEN)
