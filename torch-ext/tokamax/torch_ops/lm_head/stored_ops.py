"""The custom ops of the statistics' stored scheme (`tokamax.lm_head.stored`: plain XLA over chunks of rows, the softmax
p [kept rows, vocab] kept from the forward in the hidden states' dtype for the rows an eighth of HBM holds, the
others' logits computed again in the backward), behind `lm_head_statistics` where `statistics_layout` takes it:

- `lm_head_stats_stored_op` -> the seven statistics (float32 [rows] each, `tokamax.lm_head.OUTPUTS`' order) and
  p, `chunk` rows at a time, p for the first `kept` (static: one export per value);
- `lm_head_stats_stored_bwd_op` -> (dx, dw, db) from p, the lse, the entropy and the cotangents, `columns`
  vocabulary columns a step: two matmuls, and a third for the rows not kept;
- `lm_head_stats_stored_bwd_x_op` -> dx alone, for a head that needs no gradient (frozen).
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import lm_head
from .._bridge import chip_for_tracing, register

__all__ = ["lm_head_stats_stored_bwd_op", "lm_head_stats_stored_bwd_x_op", "lm_head_stats_stored_op",
           "statistics_layout"]


@chip_for_tracing()
def _stored_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, pre: float, tanh: bool,
                post: float, chunk: int, kept: int
                ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    stats, p = lm_head.stats.stored_forward(x, w, b, targets, lm_head.LogitTransform(pre, tanh, post), chunk, kept)
    return *stats, p


@chip_for_tracing()
def _stored_bwd_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, p: jax.Array,
                    lse: jax.Array, entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array,
                    d_sum: jax.Array, pre: float, tanh: bool, post: float, columns: int
                    ) -> tuple[jax.Array, jax.Array, jax.Array]:
    return lm_head.stats.stored_vjp(x, w, b, targets, p, lse, entropy, d_lse, d_target, d_entropy, d_sum,
                                    lm_head.LogitTransform(pre, tanh, post), columns)


@chip_for_tracing()
def _stored_bwd_x_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, p: jax.Array,
                      lse: jax.Array, entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array,
                      d_sum: jax.Array, pre: float, tanh: bool, post: float, columns: int) -> jax.Array:
    return lm_head.stats.stored_vjp(x, w, b, targets, p, lse, entropy, d_lse, d_target, d_entropy, d_sum,
                                    lm_head.LogitTransform(pre, tanh, post), columns, weight_grad=False)[0]


lm_head_stats_stored_op = register("lm_head_stats_stored", _stored_jax)
lm_head_stats_stored_bwd_op = register("lm_head_stats_stored_bwd", _stored_bwd_jax)
lm_head_stats_stored_bwd_x_op = register("lm_head_stats_stored_bwd_x", _stored_bwd_x_jax)


@lm_head_stats_stored_op.register_fake
def _stored_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor, pre: float,
                 tanh: bool, post: float, chunk: int, kept: int) -> tuple[torch.Tensor, ...]:
    width = (w.shape[0] + 127) // 128 * 128  # p's columns padded to the lanes (`lm_head.stored.forward`)
    kept_dtype = torch.float32 if tanh else x.dtype  # a soft cap's rows keep their float32 logits
    return (*(x.new_empty((x.shape[0],), dtype=torch.float32) for _ in lm_head.OUTPUTS),
            x.new_empty((kept, width), dtype=kept_dtype))


@lm_head_stats_stored_bwd_op.register_fake
def _stored_bwd_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                     p: torch.Tensor, lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor,
                     d_target: torch.Tensor, d_entropy: torch.Tensor, d_sum: torch.Tensor, pre: float, tanh: bool,
                     post: float, columns: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(w), w.new_empty((w.shape[0],), dtype=torch.float32)


@lm_head_stats_stored_bwd_x_op.register_fake
def _stored_bwd_x_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                       p: torch.Tensor, lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor,
                       d_target: torch.Tensor, d_entropy: torch.Tensor, d_sum: torch.Tensor, pre: float, tanh: bool,
                       post: float, columns: int) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, w, b, targets, pre, tanh, post, _, _ = inputs
    lse, _, _, lsq, _, top1, entropy, p = output  # lm_head.OUTPUTS, then p
    ctx.save_for_backward(x, w, b, targets, p, lse, entropy)
    ctx.transform = (pre, tanh, post)
    ctx.columns = lm_head.stored.step_columns(x.shape[0], w.shape[0])  # every layout's columns
    ctx.bias_dtype = None if b is None else b.dtype
    ctx.mark_non_differentiable(lsq, top1, p)


def _backward(ctx: Any, d_lse: torch.Tensor | None, d_target: torch.Tensor | None, d_mean: torch.Tensor | None,
              d_lsq: torch.Tensor | None, d_sum: torch.Tensor | None, d_top1: torch.Tensor | None,
              d_entropy: torch.Tensor | None, d_p: torch.Tensor | None) -> tuple:
    nothing = (None,) * 9
    x, w, b, targets, p, lse, entropy = ctx.saved_tensors
    if all(g is None for g in (d_lse, d_target, d_mean, d_sum, d_entropy)) or not any(ctx.needs_input_grad[:3]):
        return nothing
    d_lse, d_target, d_mean, d_sum, d_entropy = (torch.zeros_like(entropy) if g is None else g.to(torch.float32)
                                                 for g in (d_lse, d_target, d_mean, d_sum, d_entropy))
    # the cotangents of lse, target logit, entropy and sum of logits; the mean logit is lse - entropy
    grads = [g.contiguous() for g in (d_lse + d_mean, d_target, d_entropy - d_mean, d_sum)]
    args = (x, w, b, targets, p, lse, entropy, *grads, *ctx.transform, ctx.columns)
    if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):  # a frozen head: dx alone
        return lm_head_stats_stored_bwd_x_op(*args), *nothing[1:]
    dx, dw, db = lm_head_stats_stored_bwd_op(*args)
    return dx, dw, (None if ctx.bias_dtype is None else db.to(ctx.bias_dtype)), *nothing[3:]


lm_head_stats_stored_op.register_autograd(_backward, setup_context=_setup)


@chip_for_tracing()
def statistics_layout(hidden: torch.Tensor, weight: torch.Tensor, transform: lm_head.LogitTransform
                      ) -> tuple[int, int] | None:
    """The stored scheme's (chunk rows, kept rows) on the chip the ops are traced for (`lm_head.stats.choose_layout`),
    None for the kernels. Host code on the tensors' shapes and dtypes. Symbolic sizes (a graph
    compiled for any rows) take the kernels: a choice by the rows would specialize the graph on them."""
    rows, width, vocab = hidden.shape[0], hidden.shape[1], weight.shape[0]
    if not all(isinstance(s, int) for s in (rows, width, vocab)):
        return None
    layout = lm_head.stats.choose_layout(rows, width, vocab, hidden.element_size(), transform)
    return None if layout is None else (layout.chunk, layout.kept)
