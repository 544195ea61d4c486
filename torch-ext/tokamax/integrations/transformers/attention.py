"""The attention function transformers loads from this kernel (`attn_implementation=
"kernels-community/tokamax:attention"`): upstream's splash kernel for every phase.

transformers calls `attention(module, query, key, value, attention_mask, ...)` with [batch, heads,
len, head_dim] tensors (key and value may have fewer heads: grouped-query attention) and expects
([batch, q_len, heads, head_dim], None). For a Hub kernel it prepares flash-attention masks: a
[batch, kv_len] padding mask (true = token), cut to the slots written for a static cache, or None
when nothing is padded; `position_ids` arrive in the keyword arguments.

- Causal (or windowed) queries and keys of the same tokens (training, a prompt):
  `prefill.self_attention`, differentiable.
- Causal queries against a cache (q_len != kv_len, or a mask shorter than the keys):
  `decode.cache_step`, one op call whose program also does the step's bookkeeping and q's scaling.
- No causal mask and no window (encoders, cross-attention): `bidirectional.full_attention`,
  differentiable, any q_len and kv_len.

Scaling multiplies the queries; `sliding_window` becomes a local window (a key within the last
`sliding_window` tokens, as transformers' masks); `softcap` and `s_aux` (GPT-OSS's sinks) pass to
the kernel. Refused with a reason: attention dropout, `output_attentions`, masks of another form
(4-D or additive float masks), chunked-attention layers (Llama 4), more causal queries than keys.
Like transformers' flash attention, and unlike its eager attention, a flash-attention mask carries
no mask overlays (e.g. Gemma 3's bidirectional image blocks): those layers attend causally.
"""

from __future__ import annotations

from typing import Any

import torch

from . import cache_masks
from .bidirectional import full_attention
from .decode import cache_step
from .prefill import self_attention


def _checked_mask(attention_mask: torch.Tensor | None, batch: int, kv_len: int) -> torch.Tensor | None:
    """The padding mask of the keys' slots ([batch, <= kv_len]), as transformers' flash-attention
    masks give it (a longer one is cut to its last kv_len columns, as transformers cuts it)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or attention_mask.shape[0] != batch:
        raise ValueError(f"tokamax attention: expected a [batch, kv_len] padding mask (flash-attention masks), "
                         f"got {tuple(attention_mask.shape)}")
    if attention_mask.dtype.is_floating_point:
        raise TypeError(f"tokamax attention: expected a boolean or integer padding mask (1 = token), got "
                        f"{attention_mask.dtype}; an additive float mask would be read inverted")
    # the mask itself where no cut is needed: a cache step derives its inputs from it once per step (the same
    # object for every layer), which a fresh view per layer would defeat
    return attention_mask if attention_mask.shape[1] <= kv_len else attention_mask[:, -kv_len:]


def _refuse_chunked_layers(module: torch.nn.Module) -> None:
    """Llama 4's chunked-attention layers reach a Hub kernel with no chunk size (their flash mask and
    `sliding_window` say nothing of it); attending causally there would be silently wrong."""
    config, layer = getattr(module, "config", None), getattr(module, "layer_idx", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and layer is not None and layer < len(layer_types) and \
            layer_types[layer] == "chunked_attention":
        raise NotImplementedError(f"tokamax attention: layer {layer} is a chunked-attention layer (attention within "
                                  f"chunks of {getattr(config, 'attention_chunk_size', '?')} tokens), which "
                                  "transformers hands Hub kernels no chunk size for; use sdpa or eager")


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              is_causal: bool | None = None, sliding_window: int | None = None, softcap: float | None = None,
              s_aux: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Splash attention for transformers; see the module docstring for the mapping."""
    if dropout:
        raise NotImplementedError("tokamax attention: attention dropout is not supported (set attention_dropout=0)")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("tokamax attention: output_attentions needs the eager implementation")
    _refuse_chunked_layers(module)
    cache_masks.adopt(module)  # later forwards' cache steps: no read of the device for the mask
    batch, _, q_len, head_dim = query.shape
    kv_len = key.shape[2]
    mask = _checked_mask(attention_mask, batch, kv_len)
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    scale = head_dim**-0.5 if scaling is None else scaling
    if not causal and not sliding_window:
        q = query * scale
        return full_attention(q, key, value, mask, soft_cap=softcap, sinks=s_aux).transpose(1, 2), None
    if q_len > kv_len:
        raise ValueError(f"tokamax attention: {q_len} causal queries against {kv_len} keys; the keys must include "
                         "the queries' own tokens")
    window = None
    if sliding_window:
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    options = dict(causal=causal, window=window, soft_cap=softcap, sinks=s_aux)
    position_ids = kwargs.get("position_ids")
    if q_len == kv_len and (mask is None or mask.shape[1] == kv_len):
        out = self_attention(query * scale, key, value, mask, position_ids, **options)
    else:  # the cache op scales q in its own program
        out = cache_step(query, key, value, mask, position_ids, scale=scale, **options)
    return out.transpose(1, 2), None


# transformers 5.22 (the newest that takes kernels 0.17) accepts a Hub attention kernel without
# `flash_attn_varlen_func` only if it has `flash_attn_forward`; with no `supports_flash_attn` beside
# it, transformers then registers the function named after the colon (`...:attention`) with
# flash-attention masks ([batch, kv_len] padding), which is what `attention` takes.
flash_attn_forward = attention
