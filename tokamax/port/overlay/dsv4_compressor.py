"""DeepSeek-V4 KV compressor: compress, norm, rope and store."""

from ._src.ops.dsv4_compressor import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.dsv4_compressor import reference
from ._src.ops.dsv4_compressor.pallas_mosaic_tpu_kernel import compress_norm_rope_store

__all__ = ["kernel", "reference", "compress_norm_rope_store"]
