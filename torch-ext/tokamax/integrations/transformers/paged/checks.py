"""What `flash_paged` refuses, and why, before anything runs: each message names the function and the way out."""

from __future__ import annotations

from typing import Any

import torch

NAME = "tokamax flash_paged"
DTYPES = (torch.float32, torch.bfloat16)


def call(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float,
         is_causal: bool | None, s_aux: torch.Tensor | None, cache: Any, kwargs: dict) -> None:
    """One attention call: a continuous-batching forward of a causal layer the kernel can run."""
    if cache is None or not hasattr(cache, "cache_allocators"):
        raise ValueError(f"{NAME}: serves transformers' continuous batching only (generate_batch, "
                         "init_continuous_batching), which passes a PagedAttentionCache; for generate() use "
                         "attn_implementation='kernels-community/tokamax:attention'")
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


def allocator(cache: Any) -> Any:
    """transformers' full-attention allocator, the only kind whose pages the kernel's page table can address."""
    allocators = cache.cache_allocators
    windows = allocators.get("sliding_attention")
    if windows is not None:
        raise NotImplementedError(
            f"{NAME}: layers {windows.layer_indices} are sliding-window layers; transformers keeps their cache as "
            f"a ring of {getattr(windows, 'sliding_window', '?')} tokens, whose pages the kernel's page table "
            "(one page per block of a sequence, in order) cannot address; serve this model with "
            "attn_implementation='sdpa' or 'paged|eager' (or set the config's sliding_window=None where the model "
            "is trained without one)")
    unknown = set(allocators) - {"full_attention"}
    if unknown:
        raise NotImplementedError(f"{NAME}: transformers' cache has {sorted(unknown)} allocators, which the kernel "
                                  "cannot address; only full-attention layers are served")
    return allocators["full_attention"]
