"""Top-k on the SparseCore."""

from ._src.ops.topk import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.topk import reference
from ._src.ops.topk.pallas_mosaic_tpu_kernel import sparsecore_topk

__all__ = ["kernel", "reference", "sparsecore_topk"]
