"""Ring attention: splash attention with K/V passed around a device ring (context parallel)."""

from ._src.ops.experimental.tpu.splash_attention import ring_attention_kernel as kernel
from ._src.ops.experimental.tpu.splash_attention.ring_attention_kernel import (
    RingSplashAttentionKernel,
    SegmentIds,
    make_ring_attention,
)

__all__ = ["RingSplashAttentionKernel", "SegmentIds", "kernel", "make_ring_attention"]
