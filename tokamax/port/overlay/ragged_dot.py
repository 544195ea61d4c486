"""Ragged (grouped) matmul: `gmm` and its transpose `tgmm`, with qwix-quantized operands."""

from ._src.ops.ragged_dot import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.ragged_dot.pallas_mosaic_tpu_kernel import GroupMetadata, gmm, make_group_metadata, tgmm
from ._src.quantization import AsQArray
from ._vendor.qwix import QArray, dequantize, quantize

__all__ = ["AsQArray", "GroupMetadata", "QArray", "dequantize", "gmm", "kernel", "make_group_metadata",
           "quantize", "tgmm"]
