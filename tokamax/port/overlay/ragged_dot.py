"""Ragged (grouped) matmul: `gmm` and its transpose `tgmm`, with qwix-quantized operands.

`gmm` is upstream's kernel with the rows past the last group zero (`zero_padded_rows`, port.kdl's fix over
upstream; upstream leaves them unwritten): on unless asked off (`zero_padded_rows=False`) or within
`_src.ops.ragged_dot.tiles_hook.padded_rows_unwritten()` / `upstream_heuristics()`.
"""

import functools
from typing import Any

from ._src.ops.ragged_dot import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.ragged_dot import tiles_hook
from ._src.ops.ragged_dot.pallas_mosaic_tpu_kernel import GroupMetadata, make_group_metadata, tgmm
from ._src.quantization import AsQArray
from ._vendor.qwix import QArray, dequantize, quantize

__all__ = ["AsQArray", "GroupMetadata", "QArray", "dequantize", "gmm", "kernel", "make_group_metadata",
           "quantize", "tgmm"]


@functools.wraps(kernel.gmm)
def gmm(*args: Any, zero_padded_rows: bool | None = None, **kwargs: Any) -> Any:
    if zero_padded_rows is None:  # read at each call: the kernel takes it as a static argument
        zero_padded_rows = tiles_hook.zero_padded_rows()
    return kernel.gmm(*args, zero_padded_rows=zero_padded_rows, **kwargs)
