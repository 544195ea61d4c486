"""Splash attention on Torch tensors through upstream's public op (`ops.experimental.splash_attention`):
causal, full or local-window masks, grouped-query and multi-query attention, segment ids, a logit
soft cap and attention sinks; autograd through upstream's VJP.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import torch

from .. import ops
from .._ported import splash_attention as _splash
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["splash_attention", "splash_bwd_op", "splash_op", "splash_segments_bwd_op", "splash_segments_op"]


def _mask(q: jax.Array, k: jax.Array, causal: bool, window_left: int, window_right: int) -> Any:
    """Upstream's mask object for one mask: local (a window size >= 0), causal, or None (full)."""
    shape = (q.shape[1], k.shape[-2])
    if window_left >= 0 or window_right >= 0:
        return _splash.LocalMask(shape, window_size=(window_left if window_left >= 0 else None,
                                                     window_right if window_right >= 0 else None), offset=0)
    return _splash.CausalMask(shape) if causal else None


def _splash_public(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, window_left: int,
                   window_right: int) -> jax.Array:
    return ops.experimental.splash_attention(q, k, v, _mask(q, k, causal, window_left, window_right),
                                             is_mqa=k.ndim == 2)


def _segment_ids(q_segments: jax.Array, kv_segments: jax.Array) -> Any:
    base = importlib.import_module(".._ported._src.ops.experimental.tpu.splash_attention.base", __package__)
    return base.SegmentIds(q_segments, kv_segments)


def _splash_segments_public(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array,
                            kv_segments: jax.Array, sinks: jax.Array, causal: bool, window_left: int,
                            window_right: int, soft_cap: float, use_sinks: bool) -> jax.Array:
    """Upstream's public splash call with segment ids (padding, packed documents), a soft cap and sinks."""
    return ops.experimental.splash_attention(q, k, v, _mask(q, k, causal, window_left, window_right),
                                             _segment_ids(q_segments, kv_segments), sinks if use_sinks else None,
                                             attn_logits_soft_cap=soft_cap if soft_cap > 0 else None)


@chip_for_tracing()
def _splash_jax(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, window_left: int,
                window_right: int) -> jax.Array:
    return _splash_public(q, k, v, causal, window_left, window_right)


@chip_for_tracing()
def _splash_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, grad: jax.Array, causal: bool, window_left: int,
                    window_right: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    _, vjp = jax.vjp(lambda q, k, v: _splash_public(q, k, v, causal, window_left, window_right), q, k, v)
    return vjp(grad.astype(q.dtype))


@chip_for_tracing()
def _splash_segments_fwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array,
                             kv_segments: jax.Array, sinks: jax.Array, causal: bool, window_left: int,
                             window_right: int, soft_cap: float, use_sinks: bool) -> jax.Array:
    return _splash_segments_public(q, k, v, q_segments, kv_segments, sinks, causal, window_left, window_right,
                                   soft_cap, use_sinks)


@chip_for_tracing()
def _splash_segments_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array,
                             kv_segments: jax.Array, sinks: jax.Array, grad: jax.Array, causal: bool,
                             window_left: int, window_right: int, soft_cap: float, use_sinks: bool
                             ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, sinks: jax.Array) -> jax.Array:
        return _splash_segments_public(q, k, v, q_segments, kv_segments, sinks, causal, window_left,
                                       window_right, soft_cap, use_sinks)

    _, vjp = jax.vjp(fn, q, k, v, sinks)
    dq, dk, dv, dsinks = vjp(grad.astype(q.dtype))
    return dq, dk, dv, dsinks.astype(sinks.dtype)  # upstream's VJP gives the sinks' gradient in q's dtype


splash_op = register("splash_attention", _splash_jax)
splash_bwd_op = register("splash_attention_bwd", _splash_bwd_jax)
splash_segments_op = register("splash_attention_segments", _splash_segments_fwd_jax)
splash_segments_bwd_op = register("splash_attention_segments_bwd", _splash_segments_bwd_jax)


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
@splash_op.register_fake
def _splash_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window_left: int,
                 window_right: int) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))


@splash_bwd_op.register_fake
def _splash_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, causal: bool,
                     window_left: int, window_right: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@splash_segments_op.register_fake
def _splash_segments_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segments: torch.Tensor,
                          kv_segments: torch.Tensor, sinks: torch.Tensor, causal: bool, window_left: int,
                          window_right: int, soft_cap: float, use_sinks: bool) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))


@splash_segments_bwd_op.register_fake
def _splash_segments_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segments: torch.Tensor,
                              kv_segments: torch.Tensor, sinks: torch.Tensor, grad: torch.Tensor, causal: bool,
                              window_left: int, window_right: int, soft_cap: float, use_sinks: bool) -> tuple:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(sinks)


# ---- Autograd: upstream's VJP ------------------------------------------------------------------
def _splash_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    q, k, v, *statics = inputs
    ctx.save_for_backward(q, k, v)
    ctx.statics = statics


def _splash_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    q, k, v = ctx.saved_tensors
    dq, dk, dv = splash_bwd_op(q, k, v, grad.contiguous(), *ctx.statics)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def _splash_segments_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    q, k, v, q_segments, kv_segments, sinks, *statics = inputs
    ctx.save_for_backward(q, k, v, q_segments, kv_segments, sinks)
    ctx.statics = statics


def _splash_segments_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    q, k, v, q_segments, kv_segments, sinks = ctx.saved_tensors
    dq, dk, dv, dsinks = splash_segments_bwd_op(q, k, v, q_segments, kv_segments, sinks, grad.contiguous(),
                                                *ctx.statics)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, dsinks.to(sinks.dtype),
            None, None, None, None, None)


splash_op.register_autograd(_splash_backward, setup_context=_splash_setup)
splash_segments_op.register_autograd(_splash_segments_backward, setup_context=_splash_segments_setup)


# ---- What users call ---------------------------------------------------------------------------
def splash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                     window: tuple[int | None, int | None] | None = None, segment_ids: torch.Tensor | None = None,
                     soft_cap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Splash attention (upstream's public op), differentiable in q, k and v: softmax(q k^T, masked) v,
    no scaling.

    q [heads, q_len, head_dim]; k, v [heads, kv_len, head_dim], or [kv_len, head_dim] for
    multi-query attention; k, v may have fewer heads than q (grouped-query attention). Mask:
    causal (default), full (`causal=False`), or a local window `(left, right)` of tokens each
    side (None: unbounded). Lengths: what the public op takes (multiples of its 128 blocks; it says
    so otherwise). `segment_ids` (int32 [len], q and k alike) keeps attention within equal ids
    (padding, packed documents); `soft_cap` caps logits as `cap * tanh(x / cap)`; `sinks` (float
    [heads], differentiable) adds a per-head sink logit to each softmax denominator.
    """
    op = "splash_attention"
    _checks.tensors(op, q=q, k=k, v=v)
    _checks.floats(op, q=q, k=k, v=v)
    _checks.rank(op, "q", q, (3,), "[heads, q_len, head_dim]")
    _checks.rank(op, "k", k, (2, 3), "[heads, kv_len, head_dim] or [kv_len, head_dim]")
    if v.shape != k.shape:
        raise ValueError(f"tokamax {op}: v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.dim() == 3 and q.shape[0] % k.shape[0]:
        raise ValueError(f"tokamax {op}: q's {q.shape[0]} heads must be a multiple of k's {k.shape[0]}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"tokamax {op}: head_dim differs: q {q.shape[-1]}, k {k.shape[-1]}")
    left, right = window if window is not None else (None, None)
    if window is not None and (left is None and right is None):
        raise ValueError(f"tokamax {op}: a window needs a left or a right size")
    if segment_ids is not None or soft_cap is not None or sinks is not None:
        return _splash_with_segments(q, k, v, causal, left, right, segment_ids, soft_cap, sinks)
    return splash_op(q.contiguous(), k.contiguous(), v.contiguous(), causal,
                     -1 if left is None else int(left), -1 if right is None else int(right))


def _splash_with_segments(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, left: int | None,
                          right: int | None, segment_ids: torch.Tensor | None, soft_cap: float | None,
                          sinks: torch.Tensor | None) -> torch.Tensor:
    op = "splash_attention"
    if k.dim() != 3:
        raise ValueError(f"tokamax {op}: segment ids, soft cap and sinks take k, v as [heads, kv_len, head_dim]")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"tokamax {op}: segment ids need q_len == kv_len, got {q.shape[1]} and {k.shape[1]}")
    if segment_ids is None:
        segment_ids = torch.zeros(q.shape[1], dtype=torch.int32, device=q.device)
    _checks.tensors(op, q=q, segment_ids=segment_ids)
    if segment_ids.dtype != torch.int32 or segment_ids.shape != (q.shape[1],):
        raise ValueError(f"tokamax {op}: segment_ids must be int32 [{q.shape[1]}], got {segment_ids.dtype} "
                         f"{tuple(segment_ids.shape)}")
    if sinks is not None and sinks.shape != (q.shape[0],):
        raise ValueError(f"tokamax {op}: sinks must be [heads] = [{q.shape[0]}], got {tuple(sinks.shape)}")
    if soft_cap is not None and not soft_cap > 0:
        raise ValueError(f"tokamax {op}: soft_cap must be positive, got {soft_cap}")
    use_sinks = sinks is not None
    sinks = sinks.to(torch.float32) if use_sinks else torch.zeros(q.shape[0], dtype=torch.float32, device=q.device)
    return splash_segments_op(q.contiguous(), k.contiguous(), v.contiguous(), segment_ids.contiguous(),
                              segment_ids.contiguous(), sinks.contiguous(), causal,
                              -1 if left is None else int(left), -1 if right is None else int(right),
                              float(soft_cap) if soft_cap is not None else -1.0, use_sinks)
