"""The attention function continuous batching loads (`attn_implementation="kernels-community/tokamax:flash_paged"`).

transformers' continuous batching (`generate_batch`, `init_continuous_batching`) takes "paged|eager", "sdpa" or a
name with "flash" in it; with "flash" it builds no attention mask and calls, per layer,
`fn(module, query [1, heads, tokens, dim], key, value [1, kv_heads, tokens, dim], None, ..., cache=..., **kwargs)`
with the packed new tokens of every scheduled sequence and expects [1, tokens, heads, dim] (since transformers 5.24
the model calls `cache.update` first and passes no `cache`: `handoff` puts it back). This function does
not call `cache.update` (which, off CUDA, copies the new tokens into transformers' cache and gathers every
sequence's whole KV back out of it); it runs upstream's batched ragged paged attention (`torch_ops.batched_rpa`),
which writes the new keys and values into the kernel's own cache (`store`) and reads only each sequence's pages.
The layers of one kind (full-attention, sliding-window: one transformers allocator each) share one plan per
forward: page tables from transformers' indices (`tables`, `schedule`) or, for sliding-window layers, from pages
by position (`window`, the window passed to the kernel), sequence order, `distribution`, buckets. On CPU
tensors the op runs upstream's pure-JAX reference.
"""

from __future__ import annotations

from typing import Any

import torch

from .... import torch_ops
from . import binding, checks, schedule, store, window


def _plan(cache: store.Pages, layer: int, kwargs: dict, allocator: Any, tokens: int,
          device: torch.device) -> schedule.StepPlan:
    """The plan of this forward for the layers of `allocator`: made at its first such layer, reused by the next
    ones. A new forward starts when the layer index does not grow, or transformers' per-forward tensors are other
    objects."""
    cu_q, cu_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"]
    cu_k = cu_k[allocator.layer_type] if isinstance(cu_k, dict) else cu_k
    read_index, write_index = kwargs["read_index"][allocator.index], kwargs["write_index"][allocator.index]
    key = (cu_q, cu_k, read_index, write_index)
    held = cache.plan
    if held is None or held[0] >= layer or any(a is not b for a, b in zip(held[1], key, strict=True)):
        if isinstance(cache, window.WindowCache):
            step = window.plan(cache, kwargs, tokens, device)
        else:
            step = schedule.plan(cu_q.tolist(), cu_k.tolist(), tokens, read_index, write_index, cache.page_size,
                                 cache.block_stride, device, cache.pages_of)
        held = cache.plan = [layer, key, step]
    held[0] = layer
    return held[2]


@torch.compiler.disable  # host-side planning and a cache rebound per call
def flash_paged(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, sliding_window: int | None = None, softcap: float | None = None,
                s_aux: torch.Tensor | None = None, cache: Any = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Batched ragged paged attention for transformers' continuous batching; see the module docstring."""
    del attention_mask  # flash-style: continuous batching builds none
    checks.call(module, query, key, value, dropout, is_causal, s_aux, cache, kwargs)
    layer = module.layer_idx
    allocator = checks.allocator(cache, layer, sliding_window)
    kernel_cache = binding.store_for(cache, allocator, key)
    step = _plan(kernel_cache, layer, kwargs, allocator, query.shape[2], query.device)
    # A sliding-window layer's window is its cache's (checks: the layer's own, if it passes one, is the same)
    window_size = kernel_cache.window if isinstance(kernel_cache, window.WindowCache) else sliding_window or None
    q, k, v = (step.rows(x[0].transpose(0, 1)) for x in (query, key, value))  # [padded tokens, heads, dim]
    out, new_cache = torch_ops.batched_rpa(
        q, k, v, kernel_cache.layer(layer), step.kv_lens, step.page_indices, step.cu_q_lens, step.distribution,
        sm_scale=query.shape[-1] ** -0.5 if scaling is None else scaling, sliding_window=window_size,
        soft_cap=softcap or None)
    kernel_cache.rebind(layer, new_cache)
    return step.back(out).unsqueeze(0), None
