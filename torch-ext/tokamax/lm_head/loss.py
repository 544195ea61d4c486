"""The labels path as a differentiable JAX loss: `fused.loss_and_grads` (the gradients made in the forward) behind
`jax.custom_vjp`, so that a JAX step's `jax.grad` takes it as the last op, as the Torch op does for transformers.

The backward only scales the forward's dx, dW and db by the loss's cotangent, in float32 before their one rounding to
the operands' dtype (`fused.Pending`: scaling gradients already rounded to bf16 rounded them twice where the cotangent
is not a power of two). dW and db are made only where the weight or the bias is differentiated (a frozen head,
LoRA's, makes dx alone: two matmuls, not three).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .. import hosts
from . import fused
from .stats import _check
from .transform import IDENTITY, LogitTransform


def _primal(x: Any) -> Any:
    return x.value if isinstance(x, jax.custom_derivatives.CustomVJPPrimal) else x


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def _loss(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, weights: jax.Array,
          transform: LogitTransform, z_loss: float, smoothing: float, chunk: int | None | str) -> jax.Array:
    return fused.loss_and_grads(x, w, b, targets, weights, transform, z_loss=z_loss, smoothing=smoothing,
                                weight_grad=False, chunk=chunk)[0]


def _loss_fwd(*primals: Any) -> tuple[jax.Array, tuple]:
    x, w, b, targets, weights = (_primal(p) for p in primals[:5])
    transform, z_loss, smoothing, chunk = primals[5:]
    weight_grad = any(getattr(p, "perturbed", True) for p in primals[1:3] if p is not None)
    loss, pending = fused.loss_and_pending(x, w, b, targets, weights, transform, z_loss=z_loss, smoothing=smoothing,
                                           weight_grad=weight_grad, chunk=chunk)
    return loss, (pending, x, w, b, targets, weights)


def _loss_bwd(transform: LogitTransform, z_loss: float, smoothing: float, chunk: int | None | str,
              residuals: tuple, d_loss: Any) -> tuple:
    pending, x, w, b, targets, weights = residuals
    # targets are integers (their cotangent float0); the weights are the loss's constants (no gradient)
    no_targets = jnp.zeros(targets.shape, jax.dtypes.float0)
    if isinstance(d_loss, SymbolicZero):
        return (jnp.zeros_like(x), jnp.zeros_like(w), None if b is None else jnp.zeros_like(b), no_targets,
                jnp.zeros_like(weights))
    # the forward's float32 gradients times the cotangent, rounded once (`fused.Pending`)
    # under the forward's emulation where there is no TPU (the kernels' backward runs here): one op, said once
    dx, dw, db = hosts.emulated("lm_head.loss.loss")(pending)(d_loss.astype(jnp.float32))
    dw = jnp.zeros_like(w) if dw is None else dw
    db = None if b is None else jnp.zeros_like(b) if db is None else db.astype(b.dtype)
    return dx, dw, db, no_targets, jnp.zeros_like(weights)


_loss.defvjp(_loss_fwd, _loss_bwd, symbolic_zeros=True)


@hosts.emulated("lm_head.loss.loss")
def loss(x: jax.Array, w: jax.Array, targets: jax.Array, weights: jax.Array, *, b: jax.Array | None = None,
         transform: LogitTransform = IDENTITY, z_loss: float = 0.0, smoothing: float = 0.0,
         chunk: int | None | str = "auto") -> jax.Array:
    """sum_r weights_r cross-entropy_r (float32 []) of the logits x w^T (+ b) at `targets`, differentiable in x, w
    and b (float32 [vocab]) with no [rows, vocab] logits kept: transformers' labels loss is this with weights = the
    kept tokens' mask / their count. x [rows, hidden], w [vocab, hidden] of x's dtype, targets int [rows] (read only
    where weights > 0), weights [rows]; `z_loss`, `smoothing`: as `fused.loss_and_grads`; `chunk`: "auto" (the
    package's scheme for the chip being traced for), None (the kernels) or the chunked scheme's rows. The weights
    and targets take no gradient."""
    if b is not None and w.ndim == 2 and b.shape != (w.shape[0],):
        raise ValueError(f"tokamax lm_head loss: b must be [vocab] ({w.shape[0]}), got {b.shape}")
    _check(x, w, b, targets)
    fused.check_options("lm_head loss", weights, x.shape[0], transform, z_loss, smoothing, chunk)
    # no bias stays None: the streamed kernels then read none and make no db
    return _loss(x, w, None if b is None else b.astype(jnp.float32), targets, weights, transform, z_loss, smoothing,
                 chunk)
