"""Splash attention: block-sparse flash attention driven by masks, forward and backward."""

from ._src.ops.experimental.tpu.splash_attention import reference
from ._src.ops.experimental.tpu.splash_attention import splash_attention_kernel as kernel
from ._src.ops.experimental.tpu.splash_attention import splash_attention_mask as mask
from ._src.ops.experimental.tpu.splash_attention.splash_attention_kernel import (
    QKVLayout,
    SegmentIds,
    SplashAttentionKernel,
    SplashConfig,
    make_dynamic_splash_mha,
    make_dynamic_splash_mqa,
    make_splash_mha,
    make_splash_mha_single_device,
    make_splash_mqa,
    make_splash_mqa_single_device,
)
from ._src.ops.experimental.tpu.splash_attention.splash_attention_mask import (
    CausalMask,
    ChunkedCausalMask,
    FullMask,
    LocalMask,
    LogicalAnd,
    LogicalOr,
    Mask,
    NumpyMask,
    make_causal_mask,
    make_chunk_attention_mask,
    make_local_attention_mask,
)

__all__ = ["CausalMask", "ChunkedCausalMask", "FullMask", "LocalMask", "LogicalAnd", "LogicalOr", "Mask",
           "NumpyMask", "QKVLayout", "SegmentIds", "SplashAttentionKernel", "SplashConfig", "kernel",
           "make_causal_mask", "make_chunk_attention_mask", "make_dynamic_splash_mha",
           "make_dynamic_splash_mqa", "make_local_attention_mask", "make_splash_mha",
           "make_splash_mha_single_device", "make_splash_mqa", "make_splash_mqa_single_device", "mask",
           "reference"]
