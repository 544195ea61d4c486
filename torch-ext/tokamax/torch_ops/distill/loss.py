"""`distillation_loss`: distillation's divergence as a step's loss, sum_r weights_r divergence_r, its gradients
made in the forward (`tokamax.distill.fused`): what TRL's DistillationTrainer runs on under `use_fused_loss`, its
weights the completion mask over `num_items_in_batch` or the valid tokens.

The custom ops return the loss, the per-token divergence and entropy (no gradient: TRL logs the entropy) and the
student's dx, dw and db unrounded (`distill_loss_grads`: dx float32, dw's accumulator as the fused scheme left it,
`_forward_grads.GRADIENTS`), or dx alone for a frozen head (`distill_loss_grad_x`); their autograd scales the
gradients by the loss's cotangent and rounds them once, so the backward runs no kernel. Rounded in the forward and
scaled after (TRL's loss over `num_items_in_batch`, gradient accumulation's loss / n), they were rounded twice;
`distill.loss`, the JAX loss, holds them unrounded and rounds them once the same way (`distill.fused`). `chunk`
(static: one export per value) is the fused scheme's rows per chunk; `distill_loss_chunk` gives
`distill.fused.loss_chunk`'s for the chip the ops are traced for, 0 for the per-token op (`distillation_divergence`)
weighted: where its stored scheme fits and the fused one would add dw by the pair, or the fused scheme fits no chunk.
"""

from __future__ import annotations

import jax
import torch

from ... import distill, roofline
from .. import _forward_grads
from .._bridge import chip_for_tracing, register
from .api import check, distillation_divergence
from .custom_ops import _setting

__all__ = ["distill_loss_chunk", "distill_loss_grad_x_op", "distill_loss_grads_op", "distillation_loss"]

OP = "distillation_loss"


def _call(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
          weights: jax.Array, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool,
          t_post: float, chunk: int, weight_grad: bool) -> tuple:
    distill.check(xs, ws, bs, xt, wt, bt)
    setting = _setting(beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post)
    vocab = ws.shape[0]
    loss, div, entropy, dx, dw, db = distill.fused.loss_and_grads(
        xs, ws, distill.stored.bias(bs, vocab), xt, wt, distill.stored.bias(bt, vocab), weights, setting, chunk,
        weight_grad=weight_grad, exact=True)
    if not weight_grad:
        return loss.reshape(1), div, entropy, dx
    high, low = dw if isinstance(dw, tuple) else (dw, jax.numpy.zeros((0,), ws.dtype))  # the pair, or one array
    return loss.reshape(1), div, entropy, dx, high, low, db


@chip_for_tracing()
def _grads_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
               weights: jax.Array, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool,
               t_post: float, chunk: int
               ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    return _call(xs, ws, bs, xt, wt, bt, weights, beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post, chunk, True)


@chip_for_tracing()
def _grad_x_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
                weights: jax.Array, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float,
                t_tanh: bool, t_post: float, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    return _call(xs, ws, bs, xt, wt, bt, weights, beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post, chunk, False)


distill_loss_grads_op = register("distill_loss_grads", _grads_jax)
distill_loss_grad_x_op = register("distill_loss_grad_x", _grad_x_jax)


def _rows_out(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = xs.shape[0]
    return (xs.new_empty((1,), dtype=torch.float32), xs.new_empty((rows,), dtype=torch.float32),
            xs.new_empty((rows,), dtype=torch.float32), torch.empty_like(xs, dtype=torch.float32))


@chip_for_tracing()
def _held_pair(xs: torch.Tensor, ws: torch.Tensor, xt: torch.Tensor, chunk: int) -> bool:
    sizes = distill.blocks.Sizes(xs.shape[0], xs.shape[1], xt.shape[1], ws.shape[0], xs.element_size(),
                                 xt.element_size())
    return distill.fused.held_pair(sizes, chunk, roofline.chip())


@distill_loss_grads_op.register_fake
def _grads_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor, wt: torch.Tensor,
                bt: torch.Tensor | None, weights: torch.Tensor, beta: float, s_pre: float, s_tanh: bool, s_post: float,
                t_pre: float, t_tanh: bool, t_post: float, chunk: int) -> tuple:
    pair = _held_pair(xs, ws, xt, chunk)  # high in w_s's dtype and low in int8, else float32
    dw = (torch.empty_like(ws), torch.empty_like(ws, dtype=torch.int8)) if pair else (
        torch.empty_like(ws, dtype=torch.float32), ws.new_empty((0,)))
    return *_rows_out(xs), *dw, ws.new_empty((ws.shape[0],), dtype=torch.float32)


@distill_loss_grad_x_op.register_fake
def _grad_x_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor, wt: torch.Tensor,
                 bt: torch.Tensor | None, weights: torch.Tensor, beta: float, s_pre: float, s_tanh: bool,
                 s_post: float, t_pre: float, t_tanh: bool, t_post: float, chunk: int) -> tuple:
    return _rows_out(xs)


_forward_grads.register(distill_loss_grads_op, 3, 3)
_forward_grads.register(distill_loss_grad_x_op, 3, 1)


@chip_for_tracing()
def distill_loss_chunk(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, vocab: int,
                       weight_grad: bool = True, setting: distill.Setting | None = None) -> int:
    """The fused scheme's chunk rows on the chip the ops are traced for (`distill.fused.loss_chunk`, the JAX loss's
    rule), 0 for the per-token op weighted (its stored scheme where that fits and the fused one would add dw by the
    pair; where the fused scheme fits no chunk). Host code on the tensors' shapes and dtypes; symbolic sizes take
    the per-token op (a choice by the rows would specialize a compiled graph on them)."""
    sizes = (student_hidden.shape[0], student_hidden.shape[1], teacher_hidden.shape[1], vocab)
    if not all(isinstance(s, int) for s in sizes):
        return 0
    sizes = distill.blocks.Sizes(*sizes, student_hidden.element_size(), teacher_hidden.element_size())
    return distill.fused.loss_chunk(sizes, roofline.chip(), setting, weight_grad) or 0


def distillation_loss(student_hidden: torch.Tensor, student_weight: torch.Tensor, student_bias: torch.Tensor | None,
                      teacher_hidden: torch.Tensor, teacher_weight: torch.Tensor, teacher_bias: torch.Tensor | None,
                      weights: torch.Tensor, *, beta: float, temperature: float = 1.0,
                      student_logit_scale: float = 1.0, student_soft_cap: float | None = None,
                      teacher_logit_scale: float = 1.0, teacher_soft_cap: float | None = None,
                      chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(float32 [] sum_r weights_r divergence_r, the per-token divergence and the student's entropy float32 [rows])
    of `distillation_divergence`'s arguments and float [rows] `weights`, the loss differentiable in the student's
    hidden states, weight and bias (its gradients made in the forward, `tokamax.distill.fused`); the per-token
    outputs pass no gradient. `chunk`: the fused scheme's rows per chunk, 0 for the per-token op weighted, None (the
    default) for `distill_loss_chunk`'s choice (in a graph torch.compile traces: the per-token op)."""
    tensors = (student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias)
    setting = check(*tensors, beta=beta, temperature=temperature, student_logit_scale=student_logit_scale,
                    student_soft_cap=student_soft_cap, teacher_logit_scale=teacher_logit_scale,
                    teacher_soft_cap=teacher_soft_cap)
    if weights.shape != (student_hidden.shape[0],) or not weights.is_floating_point():
        raise ValueError(f"tokamax {OP}: weights must be a float tensor of [rows] ({student_hidden.shape[0]}), got "
                         f"{weights.dtype}{list(weights.shape)}")
    if weights.device != student_hidden.device:
        raise ValueError(f"tokamax {OP}: weights are on {weights.device}, the hidden states on "
                         f"{student_hidden.device}")
    weight_grad = student_weight.requires_grad or (student_bias is not None and student_bias.requires_grad)
    if chunk is None:
        chunk = 0 if torch.compiler.is_compiling() else distill_loss_chunk(student_hidden, teacher_hidden,
                                                                           student_weight.shape[0], weight_grad,
                                                                           setting)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
        raise ValueError(f"tokamax {OP}: chunk must be an int >= 0 (0: the per-token op) or None, got {chunk!r}")
    if not chunk:
        divergence, entropy = distillation_divergence(
            *tensors, beta=beta, temperature=temperature, student_logit_scale=student_logit_scale,
            student_soft_cap=student_soft_cap, teacher_logit_scale=teacher_logit_scale,
            teacher_soft_cap=teacher_soft_cap)
        return (weights.to(torch.float32) * divergence).sum(), divergence.detach(), entropy.detach()
    s, t = setting.student, setting.teacher
    args = (*(None if v is None else v.contiguous() for v in tensors), weights.to(torch.float32).contiguous(),
            setting.beta, s.pre, s.tanh, s.post, t.pre, t.tanh, t.post, int(chunk))
    out = distill_loss_grads_op(*args) if weight_grad else distill_loss_grad_x_op(*args)
    return out[0].reshape(()), out[1], out[2]
