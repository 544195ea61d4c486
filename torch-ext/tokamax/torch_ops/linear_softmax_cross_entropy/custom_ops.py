"""The custom ops behind `linear_softmax_cross_entropy_loss`, each with autograd through upstream's VJP
Op on the forward's residuals (no second forward):

- `linear_softmax_cross_entropy_loss_op` -> (loss, lse): upstream's public op as it is, for sizes on
  the kernel's 128-lane blocks;
- `linear_softmax_cross_entropy_rows_op` -> (losses, lse) per padded row: `tokamax.lm_loss`, any
  size (padded to the lanes inside the JAX function), the reduction left to the caller.

The kernels build a TensorCore mesh (`pltpu.TensorCoreMesh`, jax >= 0.11.1): with an older jax the ops
say so. With jax >= 0.11.1 CPU tensors run in Pallas TPU interpret mode (one TensorCore); meta tensors
(shapes only) work with any jax.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import jax
import torch

from ... import lm_loss
from .. import _checks
from .._bridge import chip_for_tracing, register

__all__ = ["linear_softmax_cross_entropy_loss_bwd_op", "linear_softmax_cross_entropy_loss_op",
           "linear_softmax_cross_entropy_rows_bwd_op", "linear_softmax_cross_entropy_rows_op"]

OP = "linear_softmax_cross_entropy_loss"


def _on_tensorcores(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Traces `fn` under a one-core abstract CPU mesh where there is no mesh and no TPU device.

    `pltpu.TensorCoreMesh` reads its core count from the abstract mesh's device, else from
    `jax.devices()[0]`; a CPU device has none. On a TPU, or under a mesh (lowering), nothing changes.
    """
    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        if not jax.sharding.get_abstract_mesh().empty or hasattr(jax.devices()[0], "num_cores"):
            return fn(*args)
        device = jax.sharding.AbstractDevice(device_kind="cpu", num_cores=1, platform="cpu")
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)):
            return fn(*args)
    return wrapped


def _mosaic_op() -> Any:
    """The Op instance the public function runs for `implementation="mosaic_tpu"` (upstream's config choice)."""
    api = importlib.import_module("..._ported._src.ops.linear_softmax_cross_entropy_loss.api", __package__)
    return api.IMPLEMENTATIONS["mosaic_tpu"]


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _lsce_jax(x: jax.Array, labels: jax.Array, w: jax.Array, reduction: str) -> tuple[jax.Array, jax.Array]:
    """(loss, lse): the public call's Op with its residual, the per-row log-sum-exp, returned too."""
    _checks.jax_has(OP, *_checks.TENSORCORE_MESH)

    def run(x: jax.Array, labels: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, (lse,) = _mosaic_op()(x, labels, w, reduction=reduction, return_residuals=True)
        return loss, lse

    return _on_tensorcores(run)(x, labels, w)


@chip_for_tracing()
def _lsce_bwd_jax(x: jax.Array, labels: jax.Array, w: jax.Array, lse: jax.Array, loss: jax.Array,
                  d_loss: jax.Array, reduction: str) -> tuple[jax.Array, jax.Array]:
    """(dx, dw): upstream's VJP Op (with its own config choice) on the forward's residual, as upstream's
    custom VJP runs it (and upstream's Torch op): no second forward. Equal, bit for bit, to `jax.vjp` of
    the public call (checked in interpret mode with jax 0.12)."""
    _checks.jax_has(OP, *_checks.TENSORCORE_MESH)

    def run(x: jax.Array, labels: jax.Array, w: jax.Array, lse: jax.Array, loss: jax.Array, d_loss: jax.Array
            ) -> tuple[jax.Array, jax.Array]:
        dx, _, dw = _mosaic_op().vjp((lse,), loss, d_loss.astype(jax.numpy.float32), x, labels, w,
                                     reduction=reduction)
        return dx, dw

    return _on_tensorcores(run)(x, labels, w, lse, loss, d_loss)


linear_softmax_cross_entropy_loss_op = register("linear_softmax_cross_entropy_loss", _lsce_jax)
linear_softmax_cross_entropy_loss_bwd_op = register("linear_softmax_cross_entropy_loss_bwd", _lsce_bwd_jax)


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
@linear_softmax_cross_entropy_loss_op.register_fake
def _lsce_fake(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, reduction: str
               ) -> tuple[torch.Tensor, torch.Tensor]:
    loss = x.new_empty((x.shape[0],) if reduction == "none" else (), dtype=torch.float32)
    return loss, x.new_empty((x.shape[0],), dtype=torch.float32)


@linear_softmax_cross_entropy_loss_bwd_op.register_fake
def _lsce_bwd_fake(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, lse: torch.Tensor, loss: torch.Tensor,
                   d_loss: torch.Tensor, reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    # upstream's backward kernel gives float32 gradients for bf16 operands too
    return torch.empty_like(x, dtype=torch.float32), torch.empty_like(w, dtype=torch.float32)


# ---- Autograd: upstream's VJP (the loss only; lse is not differentiable, as upstream's op ignores it) ----
def _lsce_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, labels, w, reduction = inputs
    loss, lse = output
    ctx.save_for_backward(x, labels, w, lse, loss)
    ctx.reduction = reduction
    ctx.mark_non_differentiable(lse)


def _lsce_backward(ctx: Any, d_loss: torch.Tensor | None, d_lse: torch.Tensor | None) -> tuple:
    x, labels, w, lse, loss = ctx.saved_tensors
    if d_loss is None:
        return None, None, None, None
    dx, dw = linear_softmax_cross_entropy_loss_bwd_op(x, labels, w, lse, loss, d_loss.to(torch.float32).contiguous(),
                                                      ctx.reduction)
    return dx.to(x.dtype), None, dw.to(w.dtype), None


linear_softmax_cross_entropy_loss_op.register_autograd(_lsce_backward, setup_context=_lsce_setup)


# ---- Any size: per-row losses of the padded problem (tokamax.lm_loss) -----------------------------
@chip_for_tracing()
def _rows_jax(x: jax.Array, labels: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(losses, lse), float32 [padded rows]."""
    _checks.jax_has(OP, *_checks.TENSORCORE_MESH)
    return _on_tensorcores(lm_loss.row_losses)(x, labels, w)


@chip_for_tracing()
def _rows_bwd_jax(x: jax.Array, labels: jax.Array, w: jax.Array, lse: jax.Array, losses: jax.Array,
                  d_losses: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(dx, dw), float32."""
    _checks.jax_has(OP, *_checks.TENSORCORE_MESH)
    return _on_tensorcores(lm_loss.row_losses_vjp)(x, labels, w, lse, losses, d_losses)


linear_softmax_cross_entropy_rows_op = register("linear_softmax_cross_entropy_rows", _rows_jax)
linear_softmax_cross_entropy_rows_bwd_op = register("linear_softmax_cross_entropy_rows_bwd", _rows_bwd_jax)


@linear_softmax_cross_entropy_rows_op.register_fake
def _rows_fake(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = (x.shape[0] + lm_loss.LANES - 1) // lm_loss.LANES * lm_loss.LANES
    return x.new_empty((rows,), dtype=torch.float32), x.new_empty((rows,), dtype=torch.float32)


@linear_softmax_cross_entropy_rows_bwd_op.register_fake
def _rows_bwd_fake(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, lse: torch.Tensor, losses: torch.Tensor,
                   d_losses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x, dtype=torch.float32), torch.empty_like(w, dtype=torch.float32)


def _rows_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, labels, w = inputs
    losses, lse = output
    ctx.save_for_backward(x, labels, w, lse, losses)
    ctx.mark_non_differentiable(lse)


def _rows_backward(ctx: Any, d_losses: torch.Tensor | None, d_lse: torch.Tensor | None) -> tuple:
    x, labels, w, lse, losses = ctx.saved_tensors
    if d_losses is None:
        return None, None, None
    d_losses = d_losses.to(torch.float32).contiguous()
    dx, dw = linear_softmax_cross_entropy_rows_bwd_op(x, labels, w, lse, losses, d_losses)
    return dx.to(x.dtype), None, dw.to(w.dtype)


linear_softmax_cross_entropy_rows_op.register_autograd(_rows_backward, setup_context=_rows_setup)
