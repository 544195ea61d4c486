"""One attention name for training, `generate()` and continuous batching:
`attn_implementation="kernels-community/tokamax:flash_attention"`.

transformers' continuous batching (`generate_batch`, TRL's GRPO/RLOO rollouts with
`use_transformers_continuous_batching=True`) takes only names with "flash" in them, and `:attention`
has none; `:flash_paged` serves continuous batching only. `flash_attention` runs `flash_paged`
(upstream's batched ragged paged attention on the kernel's paged cache) when the call carries
continuous batching's PagedAttentionCache, and `attention` (splash, every other phase) otherwise:
one model, one name, trained and sampled from in one process.
"""

from __future__ import annotations

from typing import Any

import torch

from .attention import attention
from .paged import flash_paged
from .paged.checks import is_paged_cache


def flash_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """`flash_paged` under continuous batching, `attention` everywhere else."""
    if is_paged_cache(kwargs.get("cache")):
        return flash_paged(module, query, key, value, attention_mask, *args, **kwargs)
    kwargs.pop("cache", None)
    return attention(module, query, key, value, attention_mask, *args, **kwargs)
