"""Upstream's splash modules in the ported tree, imported on first use (they import JAX and the Op
layer): the kernel, its masks and mask processing, the Op base and its Mosaic forward and VJP Ops."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any

_SPLASH = ".._ported._src.ops.experimental.tpu.splash_attention"


@functools.cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{_SPLASH}.{name}", __package__)


def kernel() -> ModuleType:
    """`splash_attention_kernel`: SplashConfig, SplashAttentionKernel, SegmentIds."""
    return _module("splash_attention_kernel")


def mask_lib() -> ModuleType:
    """`splash_attention_mask`: the lazy masks."""
    return _module("splash_attention_mask")


def mask_info() -> ModuleType:
    """`splash_attention_mask_info`: MaskInfo."""
    return _module("splash_attention_mask_info")


def base() -> ModuleType:
    """The Op base: Mask, CAUSAL_MASK, FULL_MASK, SegmentIds, DEFAULT_MASK_VALUE."""
    return _module("base")


@functools.cache
def forward_op():  # noqa: ANN201 - upstream's PallasMosaicTpuSplashAttention
    """The Op upstream's public splash call runs on TPU (its first default implementation)."""
    return _module("pallas_mosaic_tpu").PallasMosaicTpuSplashAttention()


@functools.cache
def vjp_op():  # noqa: ANN201 - upstream's PallasMosaicTpuSplashAttentionVjp
    """The VJP Op of `forward_op`."""
    return forward_op().vjp


def bind_as_public(op: Any, stand_in: Any, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
    """`op.bind(q, k, v, ...)` with the mask argument upstream's public call would bind (`stand_in`,
    from `MaskSpec.stand_in`), so that `.default_config` is upstream's config choice for the call."""
    return op.bind(q, k, v, mask=stand_in, **kwargs)


def op_arguments(segments: tuple[Any, Any] | None, sinks: Any, mqa: bool, soft_cap: float | None) -> dict[str, Any]:
    """The splash Ops' keyword arguments beyond q, k, v and the mask."""
    ids = None if segments is None else base().SegmentIds(*segments)
    return dict(segment_ids=ids, sinks=sinks, is_mqa=mqa, attn_logits_soft_cap=soft_cap)
