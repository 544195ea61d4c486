"""Where the queries of a cache step sit among the key/value slots transformers hands over.

transformers' caches return keys and values by slot: a dynamic cache exactly the tokens seen (the
queries last), a static cache all `max_cache_len` slots (those past the fill level not written yet),
a sliding-window layer the last window of tokens. With a padding mask ([batch, slots] for flash-
attention masks, cut to the slots written) the queries are the mask's last columns. Without one (no
padding: generate() drops an all-ones mask), the position ids say it: a static cache's slot index is
the token's position until a sliding window's cache is full, and then the queries are the last slots.
Without either (a few models do not pass position ids to attention), the queries are taken to be the
last keys, which holds for every dynamic cache; a static cache then needs a mask or position ids.
"""

from __future__ import annotations

import torch


def query_offset(mask: torch.Tensor | None, position_ids: torch.Tensor | None, q_len: int, kv_len: int,
                 device: torch.device) -> torch.Tensor:
    """int32 [1]: the slot of the first query. A tensor (never a Python int) so that one export of the
    kernel serves every fill level."""
    if mask is not None:
        return torch.full((1,), mask.shape[1] - q_len, dtype=torch.int32, device=device)
    if position_ids is None:
        return torch.full((1,), kv_len - q_len, dtype=torch.int32, device=device)
    first = position_ids.reshape(-1, position_ids.shape[-1])[0, :1].to(torch.int32)
    return torch.clamp(first, max=kv_len - q_len)
