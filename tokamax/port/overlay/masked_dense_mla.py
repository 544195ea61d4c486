"""Masked dense ragged paged MLA attention."""

from ._src.ops.masked_dense_mla import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.masked_dense_mla import reference
from ._src.ops.masked_dense_mla.pallas_mosaic_tpu_kernel import masked_dense_ragged_paged_attention

__all__ = ["kernel", "reference", "masked_dense_ragged_paged_attention"]
