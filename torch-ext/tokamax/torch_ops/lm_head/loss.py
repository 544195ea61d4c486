"""`lm_head_cross_entropy`: a summed cross-entropy of an LM head whose gradients come out of the
forward (`tokamax.lm_head.fused`), for a loss that is the step's last op (transformers' labels path).

`chunk` (static: one export per value) picks the scheme: the chunked one at that many rows, or 0 for our
kernels; `loss_chunk` gives what `lm_head.fused.choose` picks for the chip the ops are traced for. Each
scheme rounds dx and dW once, after the loss's cotangent (transformers' 1 / `num_items_in_batch`, gradient
accumulation's 1 / n), as `lm_head.loss` does under `jax.grad` (`fused.Pending`); rounded to bf16 in the
forward and scaled after, they were rounded twice:

- chunked: the custom ops return the loss with dx, dW and db unrounded (`lm_head_loss_grads`: dx float32,
  dW's accumulator as the scheme left it, `_forward_grads.GRADIENTS`) or dx alone for a head that needs no
  gradient (`lm_head_loss_grad_x`); their autograd scales them by the cotangent and rounds them once, so
  the backward runs no kernel. At chunk 0 these ops make the kernels' gradients, rounded (the cotangent
  then rounds them again): `lm_head_cross_entropy` takes the next ops there.
- kernels: `lm_head_loss_rows` returns the loss and the rows the backward kernels read (`fused.kernels_forward`:
  the targets, lse, entropy and three coefficients, 24 bytes a row); its autograd runs those kernels with the
  cotangent in the coefficients (`lm_head_loss_rows_bwd`, `lm_head_loss_rows_bwd_x` for a frozen head), which
  round G (the cotangent in it) for their matmuls, then dx and dW once. Nothing the weight's size is held
  from the forward, as in `Pending`: at Llama 3 8B's head (what `loss_chunk` picks on the v6e) 196,608 bytes
  and x itself (the kernels read it: 64 MiB in bf16, where nothing else keeps it), where the gradients made in
  the forward took 1,118,295,040. The kernels run as many times as before, the backward's in the backward.

`_forward_grads` gives the chunked scheme's bytes at that head (twice the rounded dW's: JAX's path holds the
same).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from ... import lm_head
from .. import _checks, _forward_grads
from .._bridge import chip_for_tracing, register
from ..linear_softmax_cross_entropy.labels import refuse

__all__ = ["lm_head_cross_entropy", "lm_head_loss_grad_x_op", "lm_head_loss_grads_op", "lm_head_loss_rows_bwd_op",
           "lm_head_loss_rows_bwd_x_op", "lm_head_loss_rows_op", "loss_chunk"]

OP = "lm_head_cross_entropy"


def _call(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array, pre: float,
          tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int, weight_grad: bool) -> tuple:
    options = dict(z_loss=z_loss, smoothing=smoothing, weight_grad=weight_grad)
    transform = lm_head.LogitTransform(pre, tanh, post)
    if chunk:
        loss, dx, dw, db = lm_head.fused.loss_and_exact_grads(x, w, b, targets, weights, transform, chunk=chunk,
                                                              **options)
    else:  # the kernels' gradients, rounded
        loss, dx, dw, db = lm_head.fused.loss_and_grads(x, w, b, targets, weights, transform, chunk=None, **options)
    if not weight_grad:
        return loss.reshape(1), dx
    high, low = dw if isinstance(dw, tuple) else (dw, jnp.zeros((0,), w.dtype))  # the pair, or one array
    if db is None:  # no bias: the op's db is zeros (its autograd gives the bias none)
        db = jnp.zeros((w.shape[0],), jnp.float32)
    return loss.reshape(1), dx, high, low, db


@chip_for_tracing()
def _loss_grads_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                    pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    return _call(x, w, b, targets, weights, pre, tanh, post, z_loss, smoothing, chunk, True)


@chip_for_tracing()
def _loss_grad_x_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                     pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                     ) -> tuple[jax.Array, jax.Array]:
    return _call(x, w, b, targets, weights, pre, tanh, post, z_loss, smoothing, chunk, False)


lm_head_loss_grads_op = register("lm_head_loss_grads", _loss_grads_jax)
lm_head_loss_grad_x_op = register("lm_head_loss_grad_x", _loss_grad_x_jax)


@chip_for_tracing()
def _held(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, tanh: bool, chunk: int) -> tuple[bool, bool]:
    itemsize = torch.empty((), dtype=x.dtype).element_size()
    return lm_head.fused.held_accumulator(chunk, x.shape[0], x.shape[1], w.shape[0], itemsize, lm_head.cost.chip(),
                                          True, tanh, b is not None)


def _dx_fake(x: torch.Tensor, chunk: int) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.float32 if chunk else x.dtype)


@lm_head_loss_grads_op.register_fake
def _grads_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                weights: torch.Tensor, pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    high, low = torch.empty_like(w), w.new_empty((0,))  # the kernels' dW, rounded
    if chunk:
        pair, scaled = _held(x, w, b, tanh, chunk)
        if pair:
            low = torch.empty_like(w, dtype=torch.int8 if scaled else w.dtype)
        else:
            high = torch.empty_like(w, dtype=torch.float32)
    return (x.new_empty((1,), dtype=torch.float32), _dx_fake(x, chunk), high, low,
            w.new_empty((w.shape[0],), dtype=torch.float32))


@lm_head_loss_grad_x_op.register_fake
def _grad_x_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                 weights: torch.Tensor, pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty((1,), dtype=torch.float32), _dx_fake(x, chunk)


_forward_grads.register(lm_head_loss_grads_op, 1, 3)
_forward_grads.register(lm_head_loss_grad_x_op, 1, 1)


@chip_for_tracing()
def _rows_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array, pre: float,
              tanh: bool, post: float, z_loss: float, smoothing: float
              ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    loss, rows = lm_head.fused.kernels_forward(x, w, b, targets, weights, lm_head.LogitTransform(pre, tanh, post),
                                               z_loss=z_loss, smoothing=smoothing)
    return loss.reshape(1), *rows


def _rows_bwd(x: jax.Array, w: jax.Array, b: jax.Array | None, rows: tuple, scale: jax.Array, pre: float,
              tanh: bool, post: float, weight_grad: bool) -> tuple:
    return lm_head.fused.kernels_backward(x, w, b, *rows, scale.astype(jnp.float32).reshape(()),
                                          lm_head.LogitTransform(pre, tanh, post), weight_grad)


@chip_for_tracing()
def _rows_bwd_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                  entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_sum: jax.Array, scale: jax.Array,
                  pre: float, tanh: bool, post: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    return _rows_bwd(x, w, b, (targets, lse, entropy, d_lse, d_target, d_sum), scale, pre, tanh, post, True)


@chip_for_tracing()
def _rows_bwd_x_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, lse: jax.Array,
                    entropy: jax.Array, d_lse: jax.Array, d_target: jax.Array, d_sum: jax.Array, scale: jax.Array,
                    pre: float, tanh: bool, post: float) -> jax.Array:
    return _rows_bwd(x, w, b, (targets, lse, entropy, d_lse, d_target, d_sum), scale, pre, tanh, post, False)[0]


lm_head_loss_rows_op = register("lm_head_loss_rows", _rows_jax)
lm_head_loss_rows_bwd_op = register("lm_head_loss_rows_bwd", _rows_bwd_jax)
lm_head_loss_rows_bwd_x_op = register("lm_head_loss_rows_bwd_x", _rows_bwd_x_jax)


@lm_head_loss_rows_op.register_fake
def _rows_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
               weights: torch.Tensor, pre: float, tanh: bool, post: float, z_loss: float, smoothing: float
               ) -> tuple[torch.Tensor, ...]:
    row = (x.shape[0],)
    return (x.new_empty((1,), dtype=torch.float32), x.new_empty(row, dtype=torch.int32),
            *(x.new_empty(row, dtype=torch.float32) for _ in range(5)))


@lm_head_loss_rows_bwd_op.register_fake
def _rows_bwd_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                   lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor, d_target: torch.Tensor,
                   d_sum: torch.Tensor, scale: torch.Tensor, pre: float, tanh: bool, post: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(w), w.new_empty((w.shape[0],), dtype=torch.float32)


@lm_head_loss_rows_bwd_x_op.register_fake
def _rows_bwd_x_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                     lse: torch.Tensor, entropy: torch.Tensor, d_lse: torch.Tensor, d_target: torch.Tensor,
                     d_sum: torch.Tensor, scale: torch.Tensor, pre: float, tanh: bool, post: float) -> torch.Tensor:
    return torch.empty_like(x)


def _rows_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, w, b = inputs[:3]
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, w, b, *output[1:])  # no gradient: the kernels' rows (`fused.kernels_forward`)
    ctx.transform = inputs[5:8]
    ctx.mark_non_differentiable(*output[1:])


def _rows_backward(ctx: Any, d_loss: torch.Tensor | None, *_: Any) -> tuple:
    """The backward kernels with the cotangent in the loss's per-row coefficients (`fused.kernels_backward`): dx and
    dW rounded once; dx alone (one kernel) where the head needs no gradient."""
    nothing = (None,) * 10
    x_grad, w_grad, b_grad = ctx.needs_input_grad[:3]
    if d_loss is None or not (x_grad or w_grad or b_grad):
        return nothing
    x, w, b, *rows = ctx.saved_tensors
    if not (w_grad or b_grad):
        return lm_head_loss_rows_bwd_x_op(x, w, b, *rows, d_loss, *ctx.transform), *nothing[1:]
    dx, dw, db = lm_head_loss_rows_bwd_op(x, w, b, *rows, d_loss, *ctx.transform)
    return (dx if x_grad else None, dw if w_grad else None, db.to(b.dtype) if b_grad else None, *nothing[3:])


lm_head_loss_rows_op.register_autograd(_rows_backward, setup_context=_rows_setup)


@chip_for_tracing()
def loss_chunk(rows: int, hidden: int, vocab: int, dtype: torch.dtype, weight_grad: bool, soft_cap: bool = False
               ) -> int:
    """The chunked scheme's rows on the chip the ops are traced for (`lm_head.fused.choose`; `soft_cap`: the logit
    transform has one), 0 for the kernels."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return lm_head.fused.choose(rows, hidden, vocab, itemsize, lm_head.cost.chip(), weight_grad, soft_cap) or 0


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
           weights: torch.Tensor) -> None:
    _checks.tensors(OP, ("bias",), x=x, weight=weight, bias=bias, targets=targets, weights=weights)
    _checks.floats(OP, x=x, weight=weight)
    _checks.rank(OP, "x", x, (2,), "[rows, hidden]")
    _checks.rank(OP, "weight", weight, (2,), "[vocab, hidden]")
    _checks.same(OP, "the hidden sizes", x=x.shape[1], weight=weight.shape[1])
    _checks.dtype(OP, "targets", targets, (torch.int32, torch.int64))
    _checks.shape(OP, "targets", targets, (x.shape[0],), "[rows]")
    if bias is not None:
        _checks.shape(OP, "bias", bias, (weight.shape[0],), "[vocab]")


def lm_head_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                          weights: torch.Tensor, transform: lm_head.LogitTransform, *, z_loss: float = 0.0,
                          smoothing: float = 0.0, chunk: int | None = None) -> torch.Tensor:
    """float32 [] sum_r weights_r loss_r (`lm_head.fused`), differentiable in x, weight and bias, its gradients
    computed in the forward. x [rows, hidden] and weight [vocab, hidden] of one dtype; targets int [rows] in
    [0, vocab) where weights > 0 (not read elsewhere): one outside is refused on CPU tensors, else makes the
    loss NaN (by either scheme); `chunk`: `loss_chunk`'s (None: ask it)."""
    _check(x, weight, bias, targets, weights)
    lm_head.fused.check_options(OP, weights, x.shape[0], transform, z_loss, smoothing, "auto")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0):
        raise ValueError(f"tokamax {OP}: chunk must be None (the package's choice), 0 (the kernels) or a positive "
                         f"number of rows, got {chunk!r}")
    refuse(OP, "targets", targets, weight.shape[0], weights)
    weight_grad = weight.requires_grad or (bias is not None and bias.requires_grad)
    if chunk is None:
        chunk = loss_chunk(x.shape[0], x.shape[1], weight.shape[0], x.dtype, weight_grad, transform.tanh)
    args = (x.contiguous(), weight.contiguous(), None if bias is None else bias.contiguous(),
            targets.to(torch.int32).contiguous(), weights.to(torch.float32).contiguous(), transform.pre,
            transform.tanh, transform.post, float(z_loss), float(smoothing), int(chunk))
    if not chunk:  # the kernels: their backward runs in autograd's (`lm_head_loss_rows`)
        return lm_head_loss_rows_op(*args[:-1])[0].reshape(())
    out = lm_head_loss_grads_op(*args) if weight_grad else lm_head_loss_grad_x_op(*args)
    return out[0].reshape(())
