"""`lm_head_cross_entropy`: a summed cross-entropy of an LM head whose gradients come out of the
forward (`tokamax.lm_head.fused`), for a loss that is the step's last op (transformers' labels path).

The custom ops return the loss with dx, dW and db (`lm_head_loss_grads`) or dx alone for a head that
needs no gradient (`lm_head_loss_grad_x`); their autograd only scales those by the loss's cotangent,
so the backward runs no kernel. `chunk` (static: one export per value) picks the scheme:
the chunked one at that many rows, or 0 for our kernels; `loss_chunk` gives what
`lm_head.fused.choose` picks for the chip the ops are traced for.
"""

from __future__ import annotations

import jax
import torch

from ... import lm_head
from .. import _checks, _forward_grads
from .._bridge import chip_for_tracing, register
from ..linear_softmax_cross_entropy.labels import refuse

__all__ = ["lm_head_cross_entropy", "lm_head_loss_grad_x_op", "lm_head_loss_grads_op", "loss_chunk"]

OP = "lm_head_cross_entropy"


def _call(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array, pre: float,
          tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int, weight_grad: bool) -> tuple:
    loss, dx, dw, db = lm_head.fused.loss_and_grads(
        x, w, b, targets, weights, lm_head.LogitTransform(pre, tanh, post), z_loss=z_loss, smoothing=smoothing,
        weight_grad=weight_grad, chunk=chunk or None)
    if weight_grad and db is None:  # no bias: the op's db is zeros (its autograd gives the bias none)
        db = jax.numpy.zeros((w.shape[0],), jax.numpy.float32)
    return loss.reshape(1), dx, dw, db


@chip_for_tracing()
def _loss_grads_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                    pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    return _call(x, w, b, targets, weights, pre, tanh, post, z_loss, smoothing, chunk, True)


@chip_for_tracing()
def _loss_grad_x_jax(x: jax.Array, w: jax.Array, b: jax.Array | None, targets: jax.Array, weights: jax.Array,
                     pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                     ) -> tuple[jax.Array, jax.Array]:
    return _call(x, w, b, targets, weights, pre, tanh, post, z_loss, smoothing, chunk, False)[:2]


lm_head_loss_grads_op = register("lm_head_loss_grads", _loss_grads_jax)
lm_head_loss_grad_x_op = register("lm_head_loss_grad_x", _loss_grad_x_jax)


@lm_head_loss_grads_op.register_fake
def _grads_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                weights: torch.Tensor, pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return (x.new_empty((1,), dtype=torch.float32), torch.empty_like(x), torch.empty_like(w),
            w.new_empty((w.shape[0],), dtype=torch.float32))


@lm_head_loss_grad_x_op.register_fake
def _grad_x_fake(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, targets: torch.Tensor,
                 weights: torch.Tensor, pre: float, tanh: bool, post: float, z_loss: float, smoothing: float, chunk: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty((1,), dtype=torch.float32), torch.empty_like(x)


_forward_grads.register(lm_head_loss_grads_op, 1, 3)
_forward_grads.register(lm_head_loss_grad_x_op, 1, 1)


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
    out = lm_head_loss_grads_op(*args) if weight_grad else lm_head_loss_grad_x_op(*args)
    return out[0].reshape(())
