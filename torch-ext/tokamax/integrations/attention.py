"""transformers attention on upstream's splash attention (the `splash_attention` Torch op).

transformers calls `attention(module, query, key, value, attention_mask, ...)` with [batch, heads,
seq, head_dim] tensors (key and value may have fewer heads: grouped-query attention) and expects
([batch, seq, heads, head_dim], None). For Hub kernels it prepares the mask as for flash
attention: a [batch, seq] padding mask (1 = token) or None. Padding becomes segment ids (tokens
and padding never attend to each other, so no row is empty); causal and sliding windows become
splash masks; scaling multiplies the queries; soft caps and sinks pass to the kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import torch_ops


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, sliding_window: int | None = None, softcap: float | None = None,
              s_aux: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Splash attention for transformers; see the module docstring for the mapping."""
    if dropout:
        raise NotImplementedError("tokamax attention: attention dropout is not supported (set attention_dropout=0)")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("tokamax attention: output_attentions needs the eager implementation")
    batch, heads, length, head_dim = query.shape
    if key.shape[2] != length:
        raise NotImplementedError(f"tokamax attention: query and key lengths differ ({length}, {key.shape[2]}); "
                                  "decoding with a cache needs another implementation")
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    window_left = sliding_window - 1 if sliding_window else None
    window = (window_left, 0 if causal else window_left) if window_left is not None else None
    q = query * (head_dim**-0.5 if scaling is None else scaling)
    outs = []
    for b in range(batch):
        segments = None
        if attention_mask is not None:
            if attention_mask.shape != (batch, length):
                raise ValueError(f"tokamax attention: expected a [batch, seq] padding mask (flash-attention "
                                 f"masks), got {tuple(attention_mask.shape)}")
            segments = attention_mask[b].to(torch.int32)
        outs.append(torch_ops.splash_attention(q[b], key[b], value[b], causal=causal, window=window,
                                               segment_ids=segments, soft_cap=softcap, sinks=s_aux))
    return torch.stack(outs).transpose(1, 2), None


# transformers 5.22 (the newest that takes kernels 0.17) accepts a Hub attention kernel without
# `flash_attn_varlen_func` only if it has `flash_attn_forward`; with no `supports_flash_attn` beside
# it, transformers then registers the function named after the colon (`...:attention`) with
# flash-attention masks ([batch, seq] padding), which is what `attention` takes.
flash_attn_forward = attention
