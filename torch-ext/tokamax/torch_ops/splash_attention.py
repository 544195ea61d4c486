"""Splash attention on Torch tensors through upstream's public op (`ops.experimental.splash_attention`):
causal, full or local-window masks, grouped-query and multi-query attention, segment ids, a logit
soft cap and attention sinks; autograd through upstream's VJP.

As upstream's custom VJP (and upstream's Torch op) does, the forward keeps the softmax residuals
(per-row max logit and log-sum-exp) and the backward runs upstream's VJP Op on them: no second
forward kernel in the backward pass. The Op is the one the public call picks: the Mosaic kernel,
or upstream's base Op where the kernel refuses the call.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
import torch

from .._ported import splash_attention as _splash
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["splash_attention", "splash_bwd_op", "splash_op"]


def _api() -> Any:
    return importlib.import_module(".._ported._src.ops.experimental.tpu.splash_attention.api", __package__)


def _call(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array | None, sinks: jax.Array | None,
          causal: bool, window_left: int, window_right: int, soft_cap: float) -> dict[str, Any]:
    """The public call's arguments beyond q, k, v: upstream's mask object for one mask (local when a
    window size is >= 0, else causal or none), segment ids (q and kv alike), sinks, the soft cap."""
    shape = (q.shape[1], k.shape[-2])
    if window_left >= 0 or window_right >= 0:
        mask = _splash.LocalMask(shape, window_size=(window_left if window_left >= 0 else None,
                                                     window_right if window_right >= 0 else None), offset=0)
    else:
        mask = _splash.CausalMask(shape) if causal else None
    base = importlib.import_module(".._ported._src.ops.experimental.tpu.splash_attention.base", __package__)
    return dict(mask=mask, segment_ids=None if segments is None else base.SegmentIds(segments, segments),
                sinks=sinks, is_mqa=k.ndim == 2, attn_logits_soft_cap=soft_cap if soft_cap > 0 else None)


def _implementation(q: jax.Array, k: jax.Array, v: jax.Array, call: dict[str, Any]) -> Any:
    """The Op the public call runs: the first of upstream's default implementations (the Mosaic kernel,
    then the base Op) that takes the call, found as the public call finds it (NotImplementedError)."""
    api = _api()
    for name in api._DEFAULT_IMPLEMENTATIONS:
        op = api.IMPLEMENTATIONS[name]
        try:
            jax.eval_shape(lambda q, k, v, op=op: op(q, k, v, **call), q, k, v)
        except NotImplementedError:
            continue
        return op
    return api.IMPLEMENTATIONS[api._DEFAULT_IMPLEMENTATIONS[0]]  # let the kernel say why it refuses


@chip_for_tracing()
def _splash_jax(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array | None, sinks: jax.Array | None,
                causal: bool, window_left: int, window_right: int, soft_cap: float
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(out, max_logits, lse): upstream's Op with its residuals."""
    call = _call(q, k, v, segments, sinks, causal, window_left, window_right, soft_cap)
    out, (max_logits, lse) = _implementation(q, k, v, call)(q, k, v, **call, return_residuals=True)
    return out, max_logits, lse


@chip_for_tracing()
def _splash_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array | None, sinks: jax.Array | None,
                    out: jax.Array, max_logits: jax.Array, lse: jax.Array, grad: jax.Array, causal: bool,
                    window_left: int, window_right: int, soft_cap: float
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv, dsinks): upstream's VJP Op on the forward's residuals, with the arguments as the
    forward Op bound them (what upstream's custom VJP passes); dsinks in the sinks' dtype (zeros [1]
    without sinks)."""
    call = _call(q, k, v, segments, sinks, causal, window_left, window_right, soft_cap)
    op = _implementation(q, k, v, call)
    bound = op.bind(q, k, v, **call)
    kwargs = {name: value for name, value in bound.kwargs.items() if name != "return_residuals"}
    grads = op.vjp((max_logits, lse), out, grad.astype(out.dtype), *bound.args, **kwargs)
    dsinks = grads.get("sinks")
    dsinks = jnp.zeros((1,), jnp.float32) if sinks is None else dsinks.astype(sinks.dtype)
    return grads["q"], grads["k"], grads["v"], dsinks


splash_op = register("splash_attention", _splash_jax)
splash_bwd_op = register("splash_attention_bwd", _splash_bwd_jax)


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
@splash_op.register_fake
def _splash_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor | None,
                 sinks: torch.Tensor | None, causal: bool, window_left: int, window_right: int, soft_cap: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = (q.shape[0], q.shape[1])
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[-1])), q.new_empty(rows, dtype=torch.float32),
            q.new_empty(rows, dtype=torch.float32))


@splash_bwd_op.register_fake
def _splash_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor | None,
                     sinks: torch.Tensor | None, out: torch.Tensor, max_logits: torch.Tensor, lse: torch.Tensor,
                     grad: torch.Tensor, causal: bool, window_left: int, window_right: int, soft_cap: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dsinks = q.new_empty((1,), dtype=torch.float32) if sinks is None else torch.empty_like(sinks)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


# ---- Autograd: upstream's VJP on the saved residuals -------------------------------------------
def _splash_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, segments, sinks, *statics = inputs
    out, max_logits, lse = output
    ctx.save_for_backward(q, k, v, segments, sinks, out, max_logits, lse)
    ctx.statics = statics
    ctx.mark_non_differentiable(max_logits, lse)


def _splash_backward(ctx: Any, grad: torch.Tensor, d_max_logits: torch.Tensor | None,
                     d_lse: torch.Tensor | None) -> tuple:
    q, k, v, segments, sinks, out, max_logits, lse = ctx.saved_tensors
    dq, dk, dv, dsinks = splash_bwd_op(q, k, v, segments, sinks, out, max_logits, lse, grad.contiguous(),
                                       *ctx.statics)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None if sinks is None else dsinks.to(sinks.dtype),
            None, None, None, None)


splash_op.register_autograd(_splash_backward, setup_context=_splash_setup)


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
    if segment_ids is not None:
        if k.dim() != 3:
            raise ValueError(f"tokamax {op}: segment ids take k, v as [heads, kv_len, head_dim]")
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"tokamax {op}: segment ids need q_len == kv_len, got {q.shape[1]} and {k.shape[1]}")
        _checks.tensors(op, q=q, segment_ids=segment_ids)
        if segment_ids.dtype != torch.int32 or segment_ids.shape != (q.shape[1],):
            raise ValueError(f"tokamax {op}: segment_ids must be int32 [{q.shape[1]}], got {segment_ids.dtype} "
                             f"{tuple(segment_ids.shape)}")
    if sinks is not None:
        _checks.tensors(op, q=q, sinks=sinks)
        if sinks.shape != (q.shape[0],):
            raise ValueError(f"tokamax {op}: sinks must be [heads] = [{q.shape[0]}], got {tuple(sinks.shape)}")
        sinks = sinks.to(torch.float32)
    if soft_cap is not None and not soft_cap > 0:
        raise ValueError(f"tokamax {op}: soft_cap must be positive, got {soft_cap}")
    out, _, _ = splash_op(q.contiguous(), k.contiguous(), v.contiguous(),
                          None if segment_ids is None else segment_ids.contiguous(),
                          None if sinks is None else sinks.contiguous(), causal,
                          -1 if left is None else int(left), -1 if right is None else int(right),
                          float(soft_cap) if soft_cap is not None else -1.0)
    return out
