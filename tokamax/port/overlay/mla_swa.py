"""MLA sliding-window ragged paged attention."""

from ._src.ops.experimental.mla_swa import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.experimental.mla_swa import reference
from ._src.ops.experimental.mla_swa.pallas_mosaic_tpu_kernel import mla_sliding_window_ragged_paged_attention

__all__ = ["kernel", "reference", "mla_sliding_window_ragged_paged_attention"]
