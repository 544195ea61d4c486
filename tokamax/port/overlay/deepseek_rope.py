"""DeepSeek rotary embedding, with optional q-norm and fp8 quantization."""

from ._src.ops.deepseek_rope import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.deepseek_rope import reference
from ._src.ops.deepseek_rope.pallas_mosaic_tpu_kernel import qnorm_rope, rope, rope_quant

__all__ = ["kernel", "reference", "rope", "qnorm_rope", "rope_quant"]
