"""Upstream's experimental TPU Op classes (`tokamax.ops.experimental.tpu` upstream)."""

from __future__ import annotations

from .._lazy import namespace
from ..tpu import _names

_OPS = {
    "experimental.fused_fp8_matmul": [("FusedFp8Matmul", "PallasMosaicTpuFusedFp8Matmul", "FusedFp8MatmulConfig")],
    "experimental.fused_moe": [("FusedMoe", "PallasMosaicTpuFusedMoe", "FusedMoeConfig")],
    "experimental.mla": [("MultiHeadLatentAttention", "PallasTpuMultiHeadLatentAttention",
                          "MultiHeadLatentAttentionConfig")],
    "experimental.mla_swa": [("MlaSwa", "PallasTpuMlaSwa", "MlaSwaConfig")],
    "experimental.tpu.splash_attention": [("SplashAttention", "PallasMosaicTpuSplashAttention",
                                           "SplashAttentionConfig")],
}
_NAMES = _names(_OPS, "._ported._src.ops")
# our SMEM check first (ops/_mla_smem.py), then upstream's Op
_NAMES["MultiHeadLatentAttention"] = (".ops._mla_smem", "PallasTpuMultiHeadLatentAttention")
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
