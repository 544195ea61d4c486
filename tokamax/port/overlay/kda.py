"""Kimi delta attention (KDA): the chunked forward and backward kernels on canonicalised inputs."""

from ._src.ops.kda import pallas_mosaic_tpu_bwd_kernel, pallas_mosaic_tpu_fwd_kernel, reference
from ._src.ops.kda import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.kda.pallas_mosaic_tpu_kernel import chunk_kda_bwd_custom, chunk_kda_fwd_custom

__all__ = ["chunk_kda_bwd_custom", "chunk_kda_fwd_custom", "kernel", "pallas_mosaic_tpu_bwd_kernel",
           "pallas_mosaic_tpu_fwd_kernel", "reference"]
