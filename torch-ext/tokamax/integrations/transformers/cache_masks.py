"""The mask function transformers calls for this kernel's attention names: its flash-attention masks, except
that a cache step's is never dropped by reading the device.

transformers registers a Hub attention kernel with its flash-attention mask function, which drops an all-ones
padding mask (`if attention_mask.all()`): a read of the device every forward. On torch-tpu that read waits for
all the work queued before it, so the host stops running ahead of the chip once per generated token. On the
v5e, GRPO's rollouts (64 tokens for 4 sequences, a 2-layer Qwen3) took 2.63 s with the flash masks and 1.62 s
without that read (eager attention 1.75 s; docs/torch-chip.md). A cache step (fewer queries than keys) gets
the padding mask cut to the keys as it is, all ones or not (`decode.cache_step` reads either the same way), and
a static cache's padded to the cache's length: grown a column a step, it changed the compiled decode step's
input shape every token, and torch.compile recompiled until its limit (8 graphs) and then ran the steps op by
op (the v5e's trace of GRPO's rollouts, 2.6x eager attention's time);
prompts and training batches, one forward each, keep transformers' masks (None without padding).

`adopt(module)`, called by `attention` on each call, registers this function for the model's attention name
wherever transformers' flash masks stand there (transformers registers them whenever a model is set to the
name, after the kernel's import, so the first forward, a prompt, still gets them). Under torch.compile it
does nothing.
"""

from __future__ import annotations

from typing import Any

import torch


def cache_step_masks(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                     mask_function: Any = None, attention_mask: torch.Tensor | None = None, **kwargs: Any
                     ) -> torch.Tensor | None:
    """transformers' `flash_attention_mask`, but a cache step's padding mask is returned without reading it."""
    from transformers.masking_utils import flash_attention_mask

    if attention_mask is not None and q_length < kv_length:
        if (short := kv_length + kv_offset - attention_mask.shape[-1]) > 0:
            # a static cache: padded to its length (as transformers' own masks are), so that the compiled decode
            # step takes a mask of one shape every step; `decode.cache_step` places the queries by the last
            # column attended to, not by the mask's length
            attention_mask = torch.nn.functional.pad(attention_mask, (0, short))
        return attention_mask[:, -kv_length:]
    kept = {} if mask_function is None else dict(mask_function=mask_function)
    return flash_attention_mask(batch_size, q_length, kv_length, q_offset, kv_offset, attention_mask=attention_mask,
                                **kept, **kwargs)


def adopt(module: torch.nn.Module) -> None:
    """Registers `cache_step_masks` for the attention name `module`'s model was loaded with, where transformers'
    flash masks are registered for it (a name registered otherwise is left as it is). Checked on every call:
    transformers registers the flash masks again each time a model is set to the name."""
    name = getattr(getattr(module, "config", None), "_attn_implementation", None)
    if not isinstance(name, str) or torch.compiler.is_compiling():
        return
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
    except ImportError:  # transformers is not what called us
        return
    if ALL_MASK_ATTENTION_FUNCTIONS.get(name) is flash_attention_mask:
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, cache_step_masks)
