"""Batched ragged paged attention (RPA): `ragged_paged_attention` over a paged KV cache, with its helpers."""

from ._src.ops.batched_rpa import reference
from ._src.ops.batched_rpa.kernel import configs, kernel, wrapper
from ._src.ops.batched_rpa.kernel.configs import AttentionScope, BlockSizes, KVLayout
from ._src.ops.batched_rpa.kernel.wrapper import get_kv_cache_shape, ragged_paged_attention

__all__ = ["AttentionScope", "BlockSizes", "KVLayout", "configs", "get_kv_cache_shape", "kernel",
           "ragged_paged_attention", "reference", "wrapper"]
