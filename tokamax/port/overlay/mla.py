"""MLA ragged paged attention."""

from ._src.ops.experimental.mla import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.experimental.mla import reference
from ._src.ops.experimental.mla.pallas_mosaic_tpu_kernel import mla_ragged_paged_attention

__all__ = ["kernel", "reference", "mla_ragged_paged_attention"]
