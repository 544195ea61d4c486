"""What `flash_paged` refuses, and why, before anything runs: each message names the function and the way out.

Served: full-attention and sliding-window layers (transformers' two cache allocators), causal, float32 or
bfloat16, soft caps. Refused: sinks, dropout, output_attentions, non-causal layers, head_dims that differ,
CUDA's block tables, a layer whose window is not its cache's, a continuous-batching call that came without its
cache (transformers >= 5.24 hands it over only through `handoff`: refused naming why, the structure `handoff`
found if it differs; a call carrying the cache, as transformers < 5.24 passes it, needs no hand-off and runs
whatever the structure), and a kept cache that transformers' own attention wrote in an earlier session
(`handoff.switched`).
"""

from __future__ import annotations

from typing import Any

import torch

from . import handoff

NAME = "tokamax flash_paged"
DTYPES = (torch.float32, torch.bfloat16)


def is_paged_cache(cache: Any) -> bool:
    """Whether `cache` is continuous batching's PagedAttentionCache (what its forwards pass as `cache=`)."""
    return cache is not None and hasattr(cache, "cache_allocators")


def is_continuous_batching_call(kwargs: dict) -> bool:
    """Whether the call comes from continuous batching's forward (its slot indices are in the kwargs)."""
    return "write_index" in kwargs and "read_index" in kwargs


def call(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float,
         is_causal: bool | None, s_aux: torch.Tensor | None, cache: Any, kwargs: dict) -> None:
    """One attention call: a continuous-batching forward of a causal layer the kernel can run."""
    if is_continuous_batching_call(kwargs) and not is_paged_cache(cache):  # where the hand-off was needed
        raise NotImplementedError(f"{NAME}: {handoff.refusal()}")
    if is_paged_cache(cache) and (taken_over := handoff.written_by_transformers(cache)) is not None:
        raise NotImplementedError(taken_over)
    if not is_paged_cache(cache):
        raise ValueError(f"{NAME}: serves transformers' continuous batching only (generate_batch, "
                         "init_continuous_batching), which passes a PagedAttentionCache; for generate() use "
                         "attn_implementation='kernels-community/tokamax:attention' (or ':flash_attention', which "
                         "serves both)")
    if dropout:
        raise NotImplementedError(f"{NAME}: attention dropout is not supported (set attention_dropout=0)")
    if kwargs.get("output_attentions"):
        raise NotImplementedError(f"{NAME}: output_attentions needs attn_implementation='paged|eager'")
    if is_causal is False or getattr(module, "is_causal", True) is False:
        raise NotImplementedError(f"{NAME}: upstream's batched ragged paged attention is causal only")
    if s_aux is not None or getattr(module, "sinks", None) is not None:
        raise NotImplementedError(f"{NAME}: attention sinks (GPT-OSS's s_aux) are not supported by upstream's "
                                  "batched ragged paged attention; use attn_implementation='paged|eager'")
    if kwargs.get("block_table") is not None:
        raise NotImplementedError(f"{NAME}: got a block table (transformers' CUDA decode fast path); the page "
                                  "tables are derived from read_index/write_index instead")
    if query.shape[0] != 1:
        raise ValueError(f"{NAME}: expected continuous batching's packed batch of one row, got query "
                         f"{tuple(query.shape)}")
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        raise NotImplementedError(f"{NAME}: queries, keys and values must share head_dim (the kernel's cache holds "
                                  f"one), got {query.shape[-1]}, {key.shape[-1]}, {value.shape[-1]}")
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{NAME}: {query.shape[1]} query heads are not a multiple of {key.shape[1]} KV heads")
    if key.dtype not in DTYPES or query.dtype != key.dtype:
        raise NotImplementedError(f"{NAME}: queries and the cache must share a dtype among float32 and bfloat16 "
                                  f"(the TPU kernel's), got {query.dtype} and {key.dtype}")


def allocator(cache: Any, layer: int, sliding_window: int | None) -> Any:
    """transformers' allocator of `layer`'s cache: full-attention (pages in order per request, addressed as they
    are) or sliding-window (a ring per request, re-laid out by position: `window`), whose window the layer's must
    be if it passes one."""
    allocator = cache.layer_to_allocator.get(layer)
    kind = getattr(allocator, "layer_type", None)
    if kind not in ("full_attention", "sliding_attention"):
        raise NotImplementedError(f"{NAME}: layer {layer} has no full-attention or sliding-window cache in "
                                  f"transformers' continuous batching (allocators: {sorted(cache.cache_allocators)})"
                                  "; only those kinds are served")
    if kind == "sliding_attention" and sliding_window and sliding_window != allocator.sliding_window:
        raise NotImplementedError(
            f"{NAME}: layer {layer} attends over a window of {sliding_window} tokens but transformers keeps a "
            f"window of {allocator.sliding_window} (the config's sliding_window) in its cache; use "
            "attn_implementation='paged|eager' or 'sdpa'")
    return allocator
