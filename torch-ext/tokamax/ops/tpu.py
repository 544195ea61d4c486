"""Upstream's TPU Op classes and their configs (`tokamax.ops.tpu` upstream), loaded on first use."""

from __future__ import annotations

from ._lazy import namespace

_RD = "._ported._src.ops.ragged_dot"
_FLASH = "._ported._src.ops.attention.pallas_mosaic_tpu"
_NAMES = {
    "FlashAttention": (_FLASH, "PallasMosaicTpuFlashAttention"),
    "FlashAttentionConfig": (_FLASH, "Config"),
    "RaggedDot": (f"{_RD}.pallas_mosaic_tpu", "PallasMosaicTpuRaggedDot"),
    "RaggedDotConfig": (f"{_RD}.pallas_mosaic_tpu", "Config"),
    "V2RaggedDot": (f"{_RD}.pallas_mosaic_tpu_v2", "PallasMosaicTpuV2RaggedDot"),
    "V2RaggedDotConfig": (f"{_RD}.pallas_mosaic_tpu_v2", "Config"),
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
