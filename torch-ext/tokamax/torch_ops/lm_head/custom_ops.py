"""The custom ops behind `lm_head_statistics`, on our LM-head kernels (`tokamax.lm_head`):

- `lm_head_stats_op` -> the seven per-row statistics (float32 [rows] each, `tokamax.lm_head.OUTPUTS`'s
  order: the mean logit third, the entropy last), NaN in the rows of targets outside the vocabulary
  (`tokamax.lm_head.targets`; `api` refuses those on CPU tensors first);
- `lm_head_stats_bwd_op` -> (dx, dw, db) from the forward's lse and entropy and the cotangents
  of lse, target logit, entropy and sum of logits; no second forward;
- `lm_head_stats_bwd_x_op` -> dx alone, for a head whose weight and bias need no gradient (frozen, as
  under LoRA): the weight's backward kernel, a vocabulary-sized matmul per step, is not run.

The logit transform travels as its three numbers (`pre`, `tanh`, `post`: `tokamax.lm_head.LogitTransform`).
CPU tensors run the kernels in Pallas TPU interpret mode (any jax the tiers hold); meta and fake
tensors run the fake kernels, with symbolic sizes.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ... import lm_head
from .._bridge import chip_for_tracing, register

__all__ = ["lm_head_stats_bwd_op", "lm_head_stats_bwd_x_op", "lm_head_stats_op"]

OP = "lm_head_statistics"
DIFFERENTIABLE = ("lse", "target_logit", "mean_logit", "sum_logits", "entropy")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _stats_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, pre: float, tanh: bool,
               post: float) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    # the kernels: Torch reads all seven statistics, which XLA's formulation (`stats.xla_forward`) makes in more
    # passes over its logits than the kernel's one
    return tuple(lm_head.row_stats(x, w, b, targets, lm_head.LogitTransform(pre, tanh, post),
                                   plan=lm_head.stats.plan_for(x, w)))


@chip_for_tracing()
def _stats_bwd_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                   entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array, d_sum: jax.Array,
                   pre: float, tanh: bool, post: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    return lm_head.row_stats_vjp(x, w, b, targets, lse, entropy, d_lse, d_target, d_entropy, d_sum,
                                 lm_head.LogitTransform(pre, tanh, post))


@chip_for_tracing()
def _stats_bwd_x_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                     entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_entropy: jax.Array,
                     d_sum: jax.Array, pre: float, tanh: bool, post: float) -> jax.Array:
    return lm_head.row_stats_vjp(x, w, b, targets, lse, entropy, d_lse, d_target, d_entropy, d_sum,
                                 lm_head.LogitTransform(pre, tanh, post), weight_grad=False)[0]


lm_head_stats_op = register("lm_head_stats", _stats_jax)
lm_head_stats_bwd_op = register("lm_head_stats_bwd", _stats_bwd_jax)
lm_head_stats_bwd_x_op = register("lm_head_stats_bwd_x", _stats_bwd_x_jax)


@lm_head_stats_op.register_fake
def _stats_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor, pre: float,
                tanh: bool, post: float) -> tuple[torch.Tensor, ...]:
    return tuple(x.new_empty((x.shape[0],), dtype=torch.float32) for _ in lm_head.OUTPUTS)


@lm_head_stats_bwd_op.register_fake
def _stats_bwd_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                    lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor, d_target: torch.Tensor,
                    d_entropy: torch.Tensor, d_sum: torch.Tensor, pre: float, tanh: bool, post: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(w), w.new_empty((w.shape[0],), dtype=torch.float32)


@lm_head_stats_bwd_x_op.register_fake
def _stats_bwd_x_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                      lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor, d_target: torch.Tensor,
                      d_entropy: torch.Tensor, d_sum: torch.Tensor, pre: float, tanh: bool, post: float
                      ) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, w, b, targets, pre, tanh, post = inputs
    lse, _, _, lsq, _, top1, entropy = output  # lm_head.OUTPUTS
    ctx.save_for_backward(x, w, b, targets, lse, entropy)
    ctx.transform = (pre, tanh, post)
    ctx.has_bias = b is not None
    ctx.mark_non_differentiable(lsq, top1)


def _backward(ctx: Any, d_lse: torch.Tensor | None, d_target: torch.Tensor | None, d_mean: torch.Tensor | None,
              d_lsq: torch.Tensor | None, d_sum: torch.Tensor | None, d_top1: torch.Tensor | None,
              d_entropy: torch.Tensor | None) -> tuple:
    x, w, b, targets, lse, entropy = ctx.saved_tensors
    if all(g is None for g in (d_lse, d_target, d_mean, d_sum, d_entropy)):
        return None, None, None, None, None, None, None
    d_lse, d_target, d_mean, d_sum, d_entropy = (torch.zeros_like(lse) if g is None else g.to(torch.float32)
                                                 for g in (d_lse, d_target, d_mean, d_sum, d_entropy))
    # the cotangents of lse, target logit, entropy and sum of logits; the mean logit is lse - entropy
    grads = [g.contiguous() for g in (d_lse + d_mean, d_target, d_entropy - d_mean, d_sum)]
    if not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):  # a frozen head: dx alone, one kernel
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None, None
        return lm_head_stats_bwd_x_op(x, w, b, targets, lse, entropy, *grads, *ctx.transform), *(None,) * 6
    dx, dw, db = lm_head_stats_bwd_op(x, w, b, targets, lse, entropy, *grads, *ctx.transform)
    return dx, dw, (db.to(b.dtype) if ctx.has_bias else None), None, None, None, None


lm_head_stats_op.register_autograd(_backward, setup_context=_setup)
