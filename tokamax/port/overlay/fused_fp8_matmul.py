"""FP8 matmul with in-kernel row quantization, and its FP8 activation-gradient kernel."""

from ._src.ops.experimental.fused_fp8_matmul import base as reference  # its XLA references and helpers
from ._src.ops.experimental.fused_fp8_matmul import pallas_mosaic_tpu_dlhs_kernel as dlhs_kernel
from ._src.ops.experimental.fused_fp8_matmul import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu_dlhs_kernel import fused_fp8_dlhs_pallas
from ._src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu_kernel import fused_fp8_matmul_pallas

__all__ = ["dlhs_kernel", "fused_fp8_dlhs_pallas", "fused_fp8_matmul_pallas", "kernel", "reference"]
