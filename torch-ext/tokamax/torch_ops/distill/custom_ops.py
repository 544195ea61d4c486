"""The custom ops behind `distillation_divergence`, on our distillation kernels (`tokamax.distill`):

- `distill_divergence_op` -> the forward kernel's five per-row outputs (float32 [rows] each: the
  divergence, the student's entropy, both log-sum-exps, the backward's auxiliary sum);
- `distill_divergence_bwd_op` -> the student's (dx, dw, db) from those and the divergence's cotangent;
  no second forward;
- `distill_divergence_bwd_x_op` -> dx alone, for a student head that needs no gradient (frozen, as under
  LoRA): the weight's backward kernel is not run.

The setting travels as numbers: beta and each model's logit map (`pre`, `tanh`, `post`:
`tokamax.lm_head.LogitTransform`, the temperature folded in). The entropy passes no gradient, as in
TRL. CPU tensors run the kernels in Pallas TPU interpret mode; meta and fake tensors run the fake
kernels, with symbolic sizes.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import distill
from ...lm_head.transform import LogitTransform
from .._bridge import chip_for_tracing, register

__all__ = ["distill_divergence_bwd_op", "distill_divergence_bwd_x_op", "distill_divergence_op"]

OP = "distillation_divergence"


def _setting(beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool,
             t_post: float) -> distill.Setting:
    return distill.Setting(beta, LogitTransform(s_pre, s_tanh, s_post), LogitTransform(t_pre, t_tanh, t_post))


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _forward_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                 bt: jax.Array | None, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float,
                 t_tanh: bool, t_post: float) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    setting = _setting(beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post)
    return tuple(distill.forward(xs, ws, bs, xt, wt, bt, setting))


def _backward(weight_grad: bool, xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
              bt: jax.Array | None, student_lse: jax.Array, teacher_lse: jax.Array, aux: jax.Array,
              entropy: jax.Array, d_divergence: jax.Array, setting: tuple) -> tuple:
    saved = distill.Forward(entropy, entropy, student_lse, teacher_lse, aux)  # the divergence is not read
    return distill.backward(xs, ws, bs, xt, wt, bt, _setting(*setting), saved, d_divergence, weight_grad=weight_grad)


@chip_for_tracing()
def _backward_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                  bt: jax.Array | None, student_lse: jax.Array, teacher_lse: jax.Array, aux: jax.Array,
                  entropy: jax.Array, d_divergence: jax.Array, beta: float, s_pre: float, s_tanh: bool,
                  s_post: float, t_pre: float, t_tanh: bool, t_post: float
                  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    return _backward(True, xs, ws, bs, xt, wt, bt, student_lse, teacher_lse, aux, entropy, d_divergence,
                     (beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post))


@chip_for_tracing()
def _backward_x_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                    bt: jax.Array | None, student_lse: jax.Array, teacher_lse: jax.Array, aux: jax.Array,
                    entropy: jax.Array, d_divergence: jax.Array, beta: float, s_pre: float, s_tanh: bool,
                    s_post: float, t_pre: float, t_tanh: bool, t_post: float) -> jax.Array:
    return _backward(False, xs, ws, bs, xt, wt, bt, student_lse, teacher_lse, aux, entropy, d_divergence,
                     (beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post))[0]


distill_divergence_op = register("distill_divergence", _forward_jax)
distill_divergence_bwd_op = register("distill_divergence_bwd", _backward_jax)
distill_divergence_bwd_x_op = register("distill_divergence_bwd_x", _backward_x_jax)


@distill_divergence_op.register_fake
def _forward_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor, wt: torch.Tensor,
                  bt: torch.Tensor | None, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float,
                  t_tanh: bool, t_post: float) -> tuple[torch.Tensor, ...]:
    return tuple(xs.new_empty((xs.shape[0],), dtype=torch.float32) for _ in distill.OUTPUTS)


@distill_divergence_bwd_op.register_fake
def _backward_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor, wt: torch.Tensor,
                   bt: torch.Tensor | None, student_lse: torch.Tensor, teacher_lse: torch.Tensor, aux: torch.Tensor,
                   entropy: torch.Tensor, d_divergence: torch.Tensor, beta: float, s_pre: float, s_tanh: bool,
                   s_post: float, t_pre: float, t_tanh: bool, t_post: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(xs), torch.empty_like(ws), ws.new_empty((ws.shape[0],), dtype=torch.float32)


@distill_divergence_bwd_x_op.register_fake
def _backward_x_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor,
                     wt: torch.Tensor, bt: torch.Tensor | None, student_lse: torch.Tensor, teacher_lse: torch.Tensor,
                     aux: torch.Tensor, entropy: torch.Tensor, d_divergence: torch.Tensor, beta: float, s_pre: float,
                     s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool, t_post: float) -> torch.Tensor:
    return torch.empty_like(xs)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    xs, ws, bs, xt, wt, bt, *setting = inputs
    _, entropy, student_lse, teacher_lse, aux = output
    ctx.save_for_backward(xs, ws, bs, xt, wt, bt, student_lse, teacher_lse, aux, entropy)
    ctx.setting = tuple(setting)
    ctx.has_bias = bs is not None
    ctx.mark_non_differentiable(*output[1:])


def _grad(ctx: Any, d_divergence: torch.Tensor | None, *unused: torch.Tensor | None) -> tuple:
    nothing = (None,) * (6 + len(ctx.setting))
    if d_divergence is None or not any(ctx.needs_input_grad[:3]):
        return nothing
    saved = ctx.saved_tensors
    d = d_divergence.to(torch.float32).contiguous()
    if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):  # a frozen head: dx alone, one kernel
        return distill_divergence_bwd_x_op(*saved, d, *ctx.setting), *nothing[1:]
    dx, dw, db = distill_divergence_bwd_op(*saved, d, *ctx.setting)
    return dx, dw, (db.to(saved[2].dtype) if ctx.has_bias else None), *nothing[3:]


distill_divergence_op.register_autograd(_grad, setup_context=_setup)
