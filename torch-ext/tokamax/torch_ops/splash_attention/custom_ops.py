"""The custom ops behind `splash_attention`, on batched tensors ([batch, heads, len, head_dim]):

- `splash_op` -> (out, logsumexp): `tokamax.splash.attend`, the mask offset fixed when tracing; its
  autograd runs `splash_bwd_op` (upstream's VJP Op on the saved residuals, as upstream's custom VJP and
  Torch op do: no second forward kernel in the backward pass). With the static `residuals` False (no
  gradient can be asked for) logsumexp is a float32 empty [batch, heads, 0]: the export then holds no
  reduction of the kernel's lane-broadcast statistics (as JAX's own path, whose unused outputs XLA drops;
  torch-tpu's export returns every output it is given). The max logits are never returned: upstream's
  backward kernel reads out and logsumexp only, and their reduction was 0.18 ms of a 5 ms forward at 8k
  tokens, 32 heads, on the v5e (the chip's trace at 59759a8), which JAX's one program never makes.
- `splash_at_op` -> out: `tokamax.splash.attend_at`, the offset an int32 tensor read at run time, so
  one export serves every fill level of a KV cache; forward only.

The mask travels as static arguments (causal, window sides, -1 for none; the offset of
`splash_op`, and its `residuals`), everything per call as tensors. Fake kernels take symbolic sizes.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import splash
from .._bridge import chip_for_tracing, register

__all__ = ["splash_at_op", "splash_bwd_op", "splash_op"]


def spec(causal: bool, window_left: int, window_right: int) -> splash.MaskSpec:
    """The mask the static arguments name (a window side < 0 is unbounded; no side >= 0: no window)."""
    if window_left < 0 and window_right < 0:
        return splash.MaskSpec.of(causal, None)
    return splash.MaskSpec.of(causal, (window_left if window_left >= 0 else None,
                                       window_right if window_right >= 0 else None))


def _cap(soft_cap: float) -> float | None:
    return soft_cap if soft_cap > 0 else None


@chip_for_tracing()
def _splash_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
                sinks: jax.Array | None, causal: bool, window_left: int, window_right: int, q_offset: int,
                soft_cap: float, residuals: bool) -> tuple[jax.Array, jax.Array]:
    """(out, logsumexp); without `residuals` logsumexp is an empty [batch, heads, 0]."""
    out, _, lse = splash.attend(q, k, v, q_ids, kv_ids, sinks, spec=spec(causal, window_left, window_right),
                                offset=q_offset, soft_cap=_cap(soft_cap))
    return out, lse if residuals else jax.numpy.zeros((*q.shape[:2], 0), jax.numpy.float32)


@chip_for_tracing()
def _splash_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
                    sinks: jax.Array | None, out: jax.Array, lse: jax.Array, grad: jax.Array, causal: bool,
                    window_left: int, window_right: int, q_offset: int, soft_cap: float
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv, dsinks): dsinks in the sinks' dtype, zeros [1] without sinks. `attend_vjp`'s max_logits is
    given the logsumexp: upstream's backward reads only its shape (its config), never its values."""
    dq, dk, dv, dsinks = splash.attend_vjp(q, k, v, q_ids, kv_ids, sinks, out, lse, lse, grad,
                                           spec=spec(causal, window_left, window_right), offset=q_offset,
                                           soft_cap=_cap(soft_cap))
    dsinks = jax.numpy.zeros((1,), jax.numpy.float32) if sinks is None else dsinks.astype(sinks.dtype)
    return dq, dk, dv, dsinks


@chip_for_tracing()
def _splash_at_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
                   q_offset: jax.Array, sinks: jax.Array | None, causal: bool, window_left: int, window_right: int,
                   soft_cap: float) -> jax.Array:
    """out, queries at KV positions q_offset + i (q_offset int32 [1])."""
    return splash.attend_at(q, k, v, q_ids, kv_ids, q_offset, sinks, spec=spec(causal, window_left, window_right),
                            soft_cap=_cap(soft_cap))


splash_op = register("splash_attention", _splash_jax)
splash_bwd_op = register("splash_attention_bwd", _splash_bwd_jax)
splash_at_op = register("splash_attention_at", _splash_at_jax)


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
def _out(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@splash_op.register_fake
def _splash_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_ids: torch.Tensor | None,
                 kv_ids: torch.Tensor | None, sinks: torch.Tensor | None, causal: bool, window_left: int,
                 window_right: int, q_offset: int, soft_cap: float, residuals: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    rows = q.shape[:-1] if residuals else (*q.shape[:2], 0)
    return _out(q, v), q.new_empty(rows, dtype=torch.float32)


@splash_bwd_op.register_fake
def _splash_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_ids: torch.Tensor | None,
                     kv_ids: torch.Tensor | None, sinks: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor,
                     grad: torch.Tensor, causal: bool, window_left: int, window_right: int, q_offset: int,
                     soft_cap: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dsinks = q.new_empty((1,), dtype=torch.float32) if sinks is None else torch.empty_like(sinks)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


@splash_at_op.register_fake
def _splash_at_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_ids: torch.Tensor | None,
                    kv_ids: torch.Tensor | None, q_offset: torch.Tensor, sinks: torch.Tensor | None, causal: bool,
                    window_left: int, window_right: int, soft_cap: float) -> torch.Tensor:
    return _out(q, v)


# ---- Autograd: upstream's VJP on the saved residuals -------------------------------------------
def _splash_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, q_ids, kv_ids, sinks, *statics, residuals = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, q_ids, kv_ids, sinks, out, lse)
    ctx.statics, ctx.residuals = statics, residuals
    ctx.mark_non_differentiable(lse)


def _splash_backward(ctx: Any, grad: torch.Tensor, d_lse: torch.Tensor | None) -> tuple:
    if not ctx.residuals:
        raise RuntimeError("tokamax splash_attention: a gradient through a call made with residuals=False; "
                           "call splash_op with residuals=True where a gradient may be asked for")
    q, k, v, q_ids, kv_ids, sinks, out, lse = ctx.saved_tensors
    dq, dk, dv, dsinks = splash_bwd_op(q, k, v, q_ids, kv_ids, sinks, out, lse, grad.contiguous(), *ctx.statics)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None,
            None if sinks is None else dsinks.to(sinks.dtype), None, None, None, None, None, None)


splash_op.register_autograd(_splash_backward, setup_context=_splash_setup)
