"""Upstream's experimental TPU Op classes (`tokamax.ops.experimental.tpu` upstream)."""

from __future__ import annotations

from .._lazy import namespace

_SPLASH = "._ported._src.ops.experimental.tpu.splash_attention"
_NAMES = {
    "SplashAttention": (f"{_SPLASH}.pallas_mosaic_tpu", "PallasMosaicTpuSplashAttention"),
    "SplashAttentionConfig": (f"{_SPLASH}.pallas_mosaic_tpu", "Config"),
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
