"""Ragged matmul v2 (`gmm_v2`, `tgmm_v2`): emit_pipeline kernels with dynamic tiles."""

from ._src.ops.gmm_v2 import gmm_v2 as kernel
from ._src.ops.gmm_v2 import tgmm_v2 as tgmm_kernel
from ._src.ops.gmm_v2.gmm_v2 import TileSizes, gmm_v2
from ._src.ops.gmm_v2.tgmm_v2 import tgmm_v2

__all__ = ["TileSizes", "gmm_v2", "kernel", "tgmm_kernel", "tgmm_v2"]
