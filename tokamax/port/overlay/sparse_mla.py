"""Sparse ragged paged MLA attention."""

from ._src.ops.sparse_mla import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.sparse_mla import reference
from ._src.ops.sparse_mla.pallas_mosaic_tpu_kernel import sparse_ragged_paged_attention

__all__ = ["kernel", "reference", "sparse_ragged_paged_attention"]
