"""One attention name for training, `generate()` and continuous batching:
`attn_implementation="kernels-community/tokamax:flash_attention"`.

transformers' continuous batching (`generate_batch`, TRL's GRPO/RLOO rollouts with
`use_transformers_continuous_batching=True`) takes only names with "flash" in them, and `:attention`
has none; `:flash_paged` serves continuous batching only. `flash_attention` runs `flash_paged`
(upstream's batched ragged paged attention on the kernel's paged cache) when the call carries
continuous batching's PagedAttentionCache (or continuous batching's slot indices: then `flash_paged` refuses
a call whose cache did not reach it, rather than splash attending across the packed sequences), and
`attention` (splash, every other phase) otherwise: one model, one name, trained and sampled from in one
process.
"""

from __future__ import annotations

from typing import Any

import torch

from .attention import attention
from .paged import flash_paged, handoff
from .paged.checks import is_continuous_batching_call, is_paged_cache


def flash_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """`flash_paged` under continuous batching, `attention` everywhere else."""
    if is_paged_cache(kwargs.get("cache")) or is_continuous_batching_call(kwargs):
        return flash_paged(module, query, key, value, attention_mask, *args, **kwargs)  # refuses a call without cache
    kwargs.pop("cache", None)
    return attention(module, query, key, value, attention_mask, *args, **kwargs)


# transformers >= 5.24 updates the paged cache in the model, before the attention function: take it there
_OURS = (flash_attention, flash_paged)
handoff.install(lambda function: any(function is f for f in _OURS))
