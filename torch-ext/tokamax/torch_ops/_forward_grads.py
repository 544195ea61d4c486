"""The autograd of a loss op whose gradients come out of its forward (the LM head's labels path, distillation's
loss): the op returns the loss, then whatever else (non-differentiable), then the gradients of its first inputs
(x, and w and b where the weight trains); the backward only scales those by the loss's cotangent, so it runs no
kernel. `register(op, grads_from, gradients)`: the gradients are the op's outputs from index `grads_from`, for its
first `gradients` inputs (the bias's cast to the bias's dtype)."""

from __future__ import annotations

from typing import Any

import torch


def _scaled(ctx: Any, d_loss: torch.Tensor | None) -> list[torch.Tensor | None]:
    saved = list(ctx.saved_tensors)
    if d_loss is None:
        return [None] * len(saved)
    scale = d_loss.to(torch.float32).reshape(())
    return [(g.to(torch.float32) * scale).to(g.dtype) for g in saved]


def register(op: Any, grads_from: int, gradients: int) -> None:
    """Registers `op`'s autograd: its outputs from `grads_from` are the gradients of its first `gradients` inputs
    (1: x alone, a frozen head; 3: x, w and b)."""
    def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output[grads_from:])
        ctx.bias_dtype = None if inputs[2] is None else inputs[2].dtype
        ctx.others = len(inputs) - gradients
        ctx.mark_non_differentiable(*output[1:])

    def backward(ctx: Any, d_loss: torch.Tensor | None, *_: Any) -> tuple:
        grads = _scaled(ctx, d_loss)
        if gradients == 3:
            db = grads[2]
            grads[2] = None if ctx.bias_dtype is None or db is None else db.to(ctx.bias_dtype)
        return *grads, *(None,) * ctx.others

    op.register_autograd(backward, setup_context=setup)
