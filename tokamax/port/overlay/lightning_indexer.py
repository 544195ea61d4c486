"""Lightning indexer: StreamIndex top-k over an FP8 paged key cache (`streamindex_topk`), with its helpers."""

from ._src.ops.lightning_indexer import reference
from ._src.ops.lightning_indexer.kernel import config
from ._src.ops.lightning_indexer.kernel import streamindex_topk as kernel
from ._src.ops.lightning_indexer.kernel.streamindex_topk import get_kv_cache_shape, streamindex_topk

__all__ = ["config", "get_kv_cache_shape", "kernel", "reference", "streamindex_topk"]
