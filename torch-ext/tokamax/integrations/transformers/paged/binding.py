"""The kernel's caches bound to transformers' continuous-batching cache: one pool per allocator, made at the
first call (`store.KernelCache` for full-attention layers, `window.WindowCache` for sliding-window ones), and
each allocator's block view pointed at its pool (`store.BlockBytes`, `ring.RingBytes`), so that forks and CPU
offloads move the kernel's pages. A module of its own: the pools build on `store.Pages`, and this binds them all.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from . import ring, window
from .store import FULL, BlockBytes, KernelCache, Pages

_STORES: weakref.WeakKeyDictionary[Any, dict[str, Pages]] = weakref.WeakKeyDictionary()


def store_for(cache: Any, allocator: Any, key: torch.Tensor) -> Pages:
    """The kernel's cache of `allocator`'s layers, bound to transformers' `cache`: on the first call one pool per
    allocator is made (every allocator at once: transformers' cache tensor, which sizes them, is then released)
    and each allocator's block view pointed at its pool."""
    stores = _STORES.get(cache)
    if stores is None:
        stores = {}
        for kind, each in cache.cache_allocators.items():
            shape = (each, key.shape[1], key.shape[3], key.dtype, key.device)
            if kind == FULL:
                stores[kind] = KernelCache(cache, *shape)
                each._copy_view = BlockBytes(stores[kind], each.bytes_per_block)
            else:
                stores[kind] = window.WindowCache(cache, *shape)
                each._copy_view = ring.RingBytes(stores[kind], each.bytes_per_block)
        # transformers reads its cache tensor only through `update` and the CUDA block-table path, neither of
        # which runs once these caches serve the model: release it.
        empty = torch.empty(0, dtype=torch.uint8, device=cache.cache_tensor.device)
        for each in cache.cache_allocators.values():
            each.cache_tensor, each._kv_token_views, each._kv_page_views = empty, {}, {}
        cache.cache_tensor = empty
        _STORES[cache] = stores
    return stores[allocator.layer_type]


def stores(cache: Any) -> dict[str, Pages]:
    """The pools bound to transformers' `cache` by kind ("full_attention", "sliding_attention"); {} before the
    first call."""
    return _STORES.get(cache, {})
