"""The autograd of a loss op whose gradients come out of its forward (the LM head's labels path in chunks,
distillation's loss): the op returns the loss, then whatever else (non-differentiable), then the gradients of its
first inputs before their rounding (dx, and where the weight trains dW's accumulator and db: `GRADIENTS`); the
backward only scales those by the loss's cotangent and rounds them, so it runs no kernel. `register(op, grads_from,
gradients)`: the gradients are the op's outputs from index `grads_from`, for its first `gradients` inputs.

The gradients stay unrounded until the cotangent is known, as `lm_head.loss`'s `Pending` holds them under
`jax.grad`: dx float32, dW's accumulator as the chunked scheme left it (float32, or the pair: high in w's dtype and
low in it or int8, `lm_head.accumulate`), db float32. Rounded to bf16 in the forward, then scaled by a cotangent that
is not a power of two (transformers' loss over `num_items_in_batch`, gradient accumulation's loss / n), they were
rounded twice. The cost is HBM held until the backward: at Llama 3 8B's head (8,192 rows, hidden 4,096, vocab
128,256, bf16; chunks of 1,024 into the 16-bit pair on the v5e, of 4,096 into float32 on the v7x) 2,236,077,056
bytes where the rounded gradients took 1,118,295,040 (dx's float32 64 MiB more, dW's sum 4 bytes an entry where
bf16 took 2; 3 with the pair's int8 low half): what `Pending` holds there (2,235,564,032), and the op's db of zeros
for a head without a bias (513,024, as before). The forward copies nothing: the pair is what the scheme summed into.

The scaling is one exported JAX function per gradient (`scale_op`): float32 product (`accumulate.finish`: the pair's
high + low), rounded once to the input's dtype, one read of the gradient (both halves of the pair) and one write. As
three Torch ops (to float32, multiply, back) it was three passes that each wrote a new tensor, 10.5 GB of HBM
traffic and 4.2 GB of temporaries for a bf16 dW at Llama 3's head (128,256 x 4,096) on torch-tpu's eager ops,
against 3.2 GB and 1 GB now. A Torch `g * scale` would be one pass too, but whether torch-tpu rounds the float32
scale to g's dtype first is its lowering's choice; the export computes the float32 product on every device.
Gradients autograd does not ask for are not scaled at all, and the other outputs' cotangents are not materialized
(autograd's zeros for the saved gradients: another dW-sized write)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from ..lm_head import accumulate
from ._bridge import register as _register_op

__all__ = ["GRADIENTS", "register", "scale_op"]

GRADIENTS = ("dx", "dw", "dw_low", "db")
"""The gradient outputs of an op whose weight trains: dx float32; dW's accumulator, float32 with `dw_low` empty
([0]), or the pair's high half in w's dtype with `dw_low` its low half; db float32 (zeros for no bias)."""


def _scale_jax(g: jax.Array, low: jax.Array | None, scale: jax.Array, dtype: str) -> jax.Array:
    """g (float32, or the pair's high half with `low`) times scale (one value) in float32, rounded once to
    `dtype`."""
    scale = scale.astype(jnp.float32).reshape(())
    if low is None:
        return (g.astype(jnp.float32) * scale).astype(dtype)
    return accumulate.finish((g, low), jnp.dtype(dtype), scale)


scale_op = _register_op("forward_grads_scale", _scale_jax)


@scale_op.register_fake
def _scale_fake(g: torch.Tensor, low: torch.Tensor | None, scale: torch.Tensor, dtype: str) -> torch.Tensor:
    return torch.empty_like(g, dtype=getattr(torch, dtype))


def _dtype(t: torch.Tensor | None) -> str | None:
    return None if t is None else str(t.dtype).removeprefix("torch.")


def register(op: Any, grads_from: int, gradients: int) -> None:
    """Registers `op`'s autograd: its outputs from `grads_from` are the unrounded gradients of its first `gradients`
    inputs (1: x alone, a frozen head; 3: x, w and b, as `GRADIENTS`)."""
    def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.set_materialize_grads(False)  # else autograd makes zeros for every other output (a dW-sized one)
        ctx.save_for_backward(*output[grads_from:])
        ctx.dtypes = tuple(_dtype(t) for t in inputs[:gradients])  # what each gradient is rounded to
        ctx.others = len(inputs) - gradients
        ctx.mark_non_differentiable(*output[1:])

    def backward(ctx: Any, d_loss: torch.Tensor | None, *_: Any) -> tuple:
        saved = ctx.saved_tensors
        if gradients == 1:
            parts = [(saved[0], None)]
        else:  # (gradient, the pair's low half or None) per input
            dx, dw, dw_low, db = saved
            parts = [(dx, None), (dw, None if dw_low.dim() == 1 else dw_low), (db, None)]
        grads = [None] * gradients
        for i, ((g, low), dtype) in enumerate(zip(parts, ctx.dtypes, strict=True)):
            # no bias (dtype None): db is the op's zeros, never returned
            if d_loss is not None and ctx.needs_input_grad[i] and dtype is not None:
                grads[i] = scale_op(g, low, d_loss.reshape(()), dtype)
        return *grads, *(None,) * ctx.others

    op.register_autograd(backward, setup_context=setup)
