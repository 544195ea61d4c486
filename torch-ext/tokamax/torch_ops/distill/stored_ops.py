"""The custom ops of distillation's stored scheme (`tokamax.distill.stored`: plain XLA, four matmuls, the
gradient's basis Q [rows padded to the chunk, vocab] kept from the forward), behind `distillation_divergence`
where `divergence_chunk` takes it:

- `distill_divergence_stored_op` -> (the divergence, the student's entropy, float32 [rows] each; Q in the
  student's dtype), `chunk` rows at a time (static: one export per value);
- `distill_divergence_stored_bwd_op` -> the student's (dx, dw, db) from Q and the divergence's cotangent: two
  matmuls, no second forward;
- `distill_divergence_stored_bwd_x_op` -> dx alone, for a frozen student head (LoRA's): one matmul.

The entropy passes no gradient, as in TRL (Q holds the divergence's alone).
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import distill, roofline
from .._bridge import chip_for_tracing, register
from .custom_ops import _setting

__all__ = ["distill_divergence_stored_bwd_op", "distill_divergence_stored_bwd_x_op", "distill_divergence_stored_op",
           "divergence_chunk"]


@chip_for_tracing()
def _stored_forward_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                        bt: jax.Array | None, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float,
                        t_tanh: bool, t_post: float, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    distill.check(xs, ws, bs, xt, wt, bt)
    setting = _setting(beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post)
    vocab = ws.shape[0]
    vectors, q = distill.stored.forward(xs, ws, distill.stored.bias(bs, vocab), xt, wt,
                                         distill.stored.bias(bt, vocab), setting, chunk)
    return vectors[0], vectors[1], q


@chip_for_tracing()
def _stored_backward_jax(xs: jax.Array, ws: jax.Array, q: jax.Array, d_divergence: jax.Array
                         ) -> tuple[jax.Array, jax.Array, jax.Array]:
    return distill.stored.backward(xs, ws, q, d_divergence)


@chip_for_tracing()
def _stored_backward_x_jax(xs: jax.Array, ws: jax.Array, q: jax.Array, d_divergence: jax.Array) -> jax.Array:
    return distill.stored.backward(xs, ws, q, d_divergence, weight_grad=False)[0]


distill_divergence_stored_op = register("distill_divergence_stored", _stored_forward_jax)
distill_divergence_stored_bwd_op = register("distill_divergence_stored_bwd", _stored_backward_jax)
distill_divergence_stored_bwd_x_op = register("distill_divergence_stored_bwd_x", _stored_backward_x_jax)


@distill_divergence_stored_op.register_fake
def _stored_forward_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor,
                         wt: torch.Tensor, bt: torch.Tensor | None, beta: float, s_pre: float, s_tanh: bool,
                         s_post: float, t_pre: float, t_tanh: bool, t_post: float, chunk: int
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = xs.shape[0]
    padded = (rows + chunk - 1) // chunk * chunk
    return (xs.new_empty((rows,), dtype=torch.float32), xs.new_empty((rows,), dtype=torch.float32),
            xs.new_empty((padded, ws.shape[0])))


@distill_divergence_stored_bwd_op.register_fake
def _stored_backward_fake(xs: torch.Tensor, ws: torch.Tensor, q: torch.Tensor, d_divergence: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(xs), torch.empty_like(ws), ws.new_empty((ws.shape[0],), dtype=torch.float32)


@distill_divergence_stored_bwd_x_op.register_fake
def _stored_backward_x_fake(xs: torch.Tensor, ws: torch.Tensor, q: torch.Tensor, d_divergence: torch.Tensor
                            ) -> torch.Tensor:
    return torch.empty_like(xs)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    xs, ws, bs = inputs[:3]
    ctx.save_for_backward(xs, ws, output[2])
    ctx.bias_dtype = None if bs is None else bs.dtype
    ctx.statics = len(inputs) - 3
    ctx.mark_non_differentiable(*output[1:])


def _grad(ctx: Any, d_divergence: torch.Tensor | None, *unused: torch.Tensor | None) -> tuple:
    nothing = (None,) * (3 + ctx.statics)
    if d_divergence is None or not any(ctx.needs_input_grad[:3]):
        return nothing
    xs, ws, q = ctx.saved_tensors
    d = d_divergence.to(torch.float32).contiguous()
    if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):  # a frozen head: dx alone, one matmul
        return distill_divergence_stored_bwd_x_op(xs, ws, q, d), *nothing[1:]
    dx, dw, db = distill_divergence_stored_bwd_op(xs, ws, q, d)
    return dx, dw, (None if ctx.bias_dtype is None else db.to(ctx.bias_dtype)), *nothing[3:]


distill_divergence_stored_op.register_autograd(_grad, setup_context=_setup)


@chip_for_tracing()
def divergence_chunk(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, vocab: int,
                     setting: distill.Setting) -> int:
    """The stored scheme's chunk rows on the chip the ops are traced for (`distill.stored.choose`), 0 for the
    kernels. Host code on the tensors' shapes and dtypes. Symbolic sizes (a graph compiled for any rows) take the
    kernels: a choice by the rows would specialize the graph on them."""
    sizes = (student_hidden.shape[0], student_hidden.shape[1], teacher_hidden.shape[1], vocab)
    if not all(isinstance(s, int) for s in sizes):
        return 0
    sizes = distill.blocks.Sizes(*sizes, student_hidden.element_size(), teacher_hidden.element_size())
    return distill.stored.choose(sizes, roofline.chip(), setting) or 0
