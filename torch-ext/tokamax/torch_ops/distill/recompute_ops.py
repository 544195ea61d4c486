"""The custom ops of distillation's recompute scheme (`tokamax.distill.recompute`: plain XLA, the stored scheme's
forward without Q, a backward that makes Q again by vocabulary columns), behind `distillation_divergence` where
`divergence_scheme` takes it (Q past the stored scheme's share of HBM, the roofline under the kernels'): the JAX
path's choice, so that a Torch user gets what a JAX user gets.

- `distill_divergence_recompute_op` -> the five per-row outputs (float32 [rows] each, `distill.OUTPUTS`: the
  divergence, the student's entropy, both log-sum-exps, the backward's auxiliary sum), `chunk` rows at a time;
  `vchunk`, the backward's columns per step, rides along for the backward (both static: one export per value);
- `distill_divergence_recompute_bwd_op` -> the student's (dx, dw, db) from both models' operands, the log-sum-exps,
  the auxiliary sum and the divergence's cotangent: both models' logits made again `vchunk` columns at a time;
- `distill_divergence_recompute_bwd_x_op` -> dx alone, for a frozen student head (LoRA's): no dw matmul.

The entropy passes no gradient, as in TRL.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import distill
from .._bridge import chip_for_tracing, register
from .custom_ops import _setting

__all__ = ["distill_divergence_recompute_bwd_op", "distill_divergence_recompute_bwd_x_op",
           "distill_divergence_recompute_op", "divergence_scheme"]


@chip_for_tracing()
def _recompute_forward_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                           bt: jax.Array | None, beta: float, s_pre: float, s_tanh: bool, s_post: float, t_pre: float,
                           t_tanh: bool, t_post: float, chunk: int, vchunk: int
                           ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    distill.check(xs, ws, bs, xt, wt, bt)
    vocab = ws.shape[0]
    return tuple(distill.recompute.forward(xs, ws, distill.stored.bias(bs, vocab), xt, wt,
                                           distill.stored.bias(bt, vocab),
                                           _setting(beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post), chunk))


def _backward(weight_grad: bool, xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
              bt: jax.Array | None, saved: tuple[jax.Array, jax.Array, jax.Array], d_divergence: jax.Array,
              setting: tuple, vchunk: int) -> tuple:
    vocab = ws.shape[0]
    return distill.recompute.backward(xs, ws, distill.stored.bias(bs, vocab), xt, wt, distill.stored.bias(bt, vocab),
                                      _setting(*setting), saved, d_divergence, vchunk, weight_grad=weight_grad)


@chip_for_tracing()
def _recompute_backward_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                            bt: jax.Array | None, student_lse: jax.Array, teacher_lse: jax.Array, aux: jax.Array,
                            d_divergence: jax.Array, beta: float, s_pre: float, s_tanh: bool, s_post: float,
                            t_pre: float, t_tanh: bool, t_post: float, vchunk: int
                            ) -> tuple[jax.Array, jax.Array, jax.Array]:
    return _backward(True, xs, ws, bs, xt, wt, bt, (student_lse, teacher_lse, aux), d_divergence,
                     (beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post), vchunk)


@chip_for_tracing()
def _recompute_backward_x_jax(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
                              bt: jax.Array | None, student_lse: jax.Array, teacher_lse: jax.Array, aux: jax.Array,
                              d_divergence: jax.Array, beta: float, s_pre: float, s_tanh: bool, s_post: float,
                              t_pre: float, t_tanh: bool, t_post: float, vchunk: int) -> jax.Array:
    return _backward(False, xs, ws, bs, xt, wt, bt, (student_lse, teacher_lse, aux), d_divergence,
                     (beta, s_pre, s_tanh, s_post, t_pre, t_tanh, t_post), vchunk)[0]


distill_divergence_recompute_op = register("distill_divergence_recompute", _recompute_forward_jax)
distill_divergence_recompute_bwd_op = register("distill_divergence_recompute_bwd", _recompute_backward_jax)
distill_divergence_recompute_bwd_x_op = register("distill_divergence_recompute_bwd_x", _recompute_backward_x_jax)


@distill_divergence_recompute_op.register_fake
def _recompute_forward_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor,
                            wt: torch.Tensor, bt: torch.Tensor | None, beta: float, s_pre: float, s_tanh: bool,
                            s_post: float, t_pre: float, t_tanh: bool, t_post: float, chunk: int, vchunk: int
                            ) -> tuple[torch.Tensor, ...]:
    return tuple(xs.new_empty((xs.shape[0],), dtype=torch.float32) for _ in distill.OUTPUTS)


@distill_divergence_recompute_bwd_op.register_fake
def _recompute_backward_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor,
                             wt: torch.Tensor, bt: torch.Tensor | None, student_lse: torch.Tensor,
                             teacher_lse: torch.Tensor, aux: torch.Tensor, d_divergence: torch.Tensor, beta: float,
                             s_pre: float, s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool, t_post: float,
                             vchunk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(xs), torch.empty_like(ws), ws.new_empty((ws.shape[0],), dtype=torch.float32)


@distill_divergence_recompute_bwd_x_op.register_fake
def _recompute_backward_x_fake(xs: torch.Tensor, ws: torch.Tensor, bs: torch.Tensor | None, xt: torch.Tensor,
                               wt: torch.Tensor, bt: torch.Tensor | None, student_lse: torch.Tensor,
                               teacher_lse: torch.Tensor, aux: torch.Tensor, d_divergence: torch.Tensor, beta: float,
                               s_pre: float, s_tanh: bool, s_post: float, t_pre: float, t_tanh: bool, t_post: float,
                               vchunk: int) -> torch.Tensor:
    return torch.empty_like(xs)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    xs, ws, bs, xt, wt, bt, *setting, _, vchunk = inputs
    _, _, student_lse, teacher_lse, aux = output
    ctx.save_for_backward(xs, ws, bs, xt, wt, bt, student_lse, teacher_lse, aux)
    ctx.setting, ctx.vchunk = tuple(setting), vchunk
    ctx.has_bias = bs is not None
    ctx.mark_non_differentiable(*output[1:])


def _grad(ctx: Any, d_divergence: torch.Tensor | None, *unused: torch.Tensor | None) -> tuple:
    nothing = (None,) * (6 + len(ctx.setting) + 2)
    if d_divergence is None or not any(ctx.needs_input_grad[:3]):
        return nothing
    saved = ctx.saved_tensors
    d = d_divergence.to(torch.float32).contiguous()
    if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):  # a frozen head: dx alone, no dw matmul
        return distill_divergence_recompute_bwd_x_op(*saved, d, *ctx.setting, ctx.vchunk), *nothing[1:]
    dx, dw, db = distill_divergence_recompute_bwd_op(*saved, d, *ctx.setting, ctx.vchunk)
    return dx, dw, (db.to(saved[2].dtype) if ctx.has_bias else None), *nothing[3:]


distill_divergence_recompute_op.register_autograd(_grad, setup_context=_setup)


@chip_for_tracing()
def divergence_scheme(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, vocab: int,
                      setting: distill.Setting, scheme: str = "auto") -> distill.Chosen:
    """What `scheme` runs on the chip the ops are traced for: `distill.scheme_of`, the JAX call's rule, on the
    tensors' shapes and dtypes (host code). Symbolic sizes (a graph compiled for any rows): "auto" takes the kernels
    (a choice by the rows would specialize the graph on them), a scheme named its smallest chunks."""
    sizes = (*student_hidden.shape, teacher_hidden.shape[1], vocab)
    if all(isinstance(s, int) for s in sizes):
        return distill.scheme_of(scheme, student_hidden, teacher_hidden, vocab, setting)
    if scheme == "recompute":  # asked for by name: its smallest chunks, which fit any rows the share holds
        return distill.Chosen("recompute", distill.recompute.CHUNKS[-1], distill.recompute.VCHUNKS[-1])
    if scheme == "stored":
        return distill.Chosen("stored", distill.stored.CHUNKS[-1])
    return distill.Chosen("kernels")
