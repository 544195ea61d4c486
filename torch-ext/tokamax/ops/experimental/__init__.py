"""Upstream's experimental public ops (`tokamax.ops.experimental` upstream), loaded on first use."""

from __future__ import annotations

from .._lazy import namespace

_NAMES = {
    "fused_moe": (".ops._fused_moe", "fused_moe"),  # upstream's, its refusals named
    "fused_moe_decode": (".ops._moe_decode", "fused_moe_decode"),  # upstream's, VMEM checked first
    "mla_swa": ("._ported._src.ops.experimental.mla_swa.api", "mla_swa"),
    "splash_attention": ("._ported._src.ops.experimental.tpu.splash_attention.api", "splash_attention"),
    "tpu": (".ops.experimental.tpu", ""),
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
