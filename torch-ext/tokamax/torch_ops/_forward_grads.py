"""The autograd of a loss op whose gradients come out of its forward (the LM head's labels path, distillation's
loss): the op returns the loss, then whatever else (non-differentiable), then the gradients of its first inputs
(x, and w and b where the weight trains); the backward only scales those by the loss's cotangent, so it runs no
kernel. `register(op, grads_from, gradients)`: the gradients are the op's outputs from index `grads_from`, for its
first `gradients` inputs (the bias's cast to the bias's dtype).

The scaling is one exported JAX function per gradient (`scale_op`): float32 product, rounded once to the gradient's
dtype, one read and one write of the gradient. As three Torch ops (to float32, multiply, back) it was three passes
that each wrote a new tensor, 10.5 GB of HBM traffic and 4.2 GB of temporaries for a bf16 dW at Llama 3's head
(128,256 x 4,096) on torch-tpu's eager ops, against 2.1 GB and 1 GB now. A Torch `g * scale` would be one pass too,
but whether torch-tpu rounds the float32 scale to g's dtype first is its lowering's choice; the export computes
exactly what the three ops did, on every device. Gradients autograd does not ask for are not scaled at all, and the
other outputs' cotangents are not materialized (autograd's zeros for the saved dx, dW and db: another dW-sized
write)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from ._bridge import register as _register_op

__all__ = ["register", "scale_op"]


def _scale_jax(g: jax.Array, scale: jax.Array) -> jax.Array:
    """g * scale (scale: one value), computed in float32 and rounded once to g's dtype."""
    return (g.astype(jnp.float32) * scale.astype(jnp.float32).reshape(())).astype(g.dtype)


scale_op = _register_op("forward_grads_scale", _scale_jax)


@scale_op.register_fake
def _scale_fake(g: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(g)


def _scaled(ctx: Any, d_loss: torch.Tensor | None, wanted: tuple[bool, ...]) -> list[torch.Tensor | None]:
    """The saved gradients times the loss's cotangent, None where `wanted` says autograd needs none."""
    saved = list(ctx.saved_tensors)
    if d_loss is None:
        return [None] * len(saved)
    scale = d_loss.reshape(())
    return [scale_op(g, scale) if want else None for g, want in zip(saved, wanted, strict=True)]


def register(op: Any, grads_from: int, gradients: int) -> None:
    """Registers `op`'s autograd: its outputs from `grads_from` are the gradients of its first `gradients` inputs
    (1: x alone, a frozen head; 3: x, w and b)."""
    def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.set_materialize_grads(False)  # else autograd makes zeros for every other output (a dW-sized one)
        ctx.save_for_backward(*output[grads_from:])
        ctx.bias_dtype = None if inputs[2] is None else inputs[2].dtype
        ctx.others = len(inputs) - gradients
        ctx.mark_non_differentiable(*output[1:])

    def backward(ctx: Any, d_loss: torch.Tensor | None, *_: Any) -> tuple:
        wanted = tuple(ctx.needs_input_grad[:gradients])
        if gradients == 3:  # no bias: db is the op's zeros, never returned
            wanted = (*wanted[:2], wanted[2] and ctx.bias_dtype is not None)
        grads = _scaled(ctx, d_loss, wanted)
        if gradients == 3:
            db = grads[2]
            grads[2] = None if db is None else db.to(ctx.bias_dtype)
        return *grads, *(None,) * ctx.others

    op.register_autograd(backward, setup_context=setup)
