"""The grouped-matmul custom ops behind `ragged_dot`'s functions (`gmm_op`, `gmm_bwd_op`, `tgmm_op`, the v2
pair), their JAX functions, fake kernels and autograd: a module of their own, so that the DTensor rules
(`_sharding.grouped_matmul`) and the functions users call (`ragged_dot`) both build on them without importing
each other.

An autotuning result applied with `tokamax.tuning` (a `use` block, or `TOKAMAX_AUTOTUNING_RESULT`)
reaches the public op's config choice: each custom op takes the result's token as a static argument
(`autotuning`, "" for none), so torch-tpu exports once per result, and traces under that result.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from .. import ops
from .._ported import gmm_v2 as _gmm_v2
from ..tuning import active as tuning
from ._bridge import chip_for_tracing, register

__all__ = ["gmm_bwd_op", "gmm_op", "gmm_v2_op", "tgmm_op", "tgmm_v2_op"]

_GMM = jax.lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])  # lhs [m, k] x rhs [g, k, n]
_GMM_T = jax.lax.RaggedDotDimensionNumbers((([1], [2]), ([], [])), [0], [0])  # rhs [g, n, k]
_TGMM = jax.lax.RaggedDotDimensionNumbers((([0], [0]), ([], [])), [0], [])  # lhs [m, k] x grad [m, n]
_V2_NO_CPU = "dynamic DMA sizes, DMAs into reshaped refs and SMEM operands"


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
def _gmm_public(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool) -> jax.Array:
    # lhs and rhs share a dtype (checked), so the output has it without naming it: as a JAX user's call
    # (and upstream's Torch op) does, which is what upstream's tables are keyed on. Traced sizes are clipped by
    # the public op (its flag, a checkify check, exports; CPU tensors' sizes are checked before: `_checks.group_sizes`).
    return ops.ragged_dot_general(lhs, rhs, group_sizes, _GMM_T if transpose_rhs else _GMM)


@chip_for_tracing()
def _gmm_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool, autotuning: str
             ) -> jax.Array:
    with tuning.applied(autotuning, "gmm"):
        return _gmm_public(lhs, rhs, group_sizes, transpose_rhs)


@chip_for_tracing()
def _gmm_bwd_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, grad: jax.Array, transpose_rhs: bool,
                 autotuning: str) -> tuple[jax.Array, jax.Array]:
    with tuning.applied(autotuning, "gmm backward"):
        _, vjp = jax.vjp(lambda a, b: _gmm_public(a, b, group_sizes, transpose_rhs), lhs, rhs)
        return vjp(grad)


@chip_for_tracing()
def _tgmm_jax(lhs: jax.Array, grad: jax.Array, group_sizes: jax.Array, autotuning: str) -> jax.Array:
    with tuning.applied(autotuning, "tgmm"):
        return ops.ragged_dot_general(lhs, grad, group_sizes, _TGMM)


@chip_for_tracing()
def _gmm_v2_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool) -> jax.Array:
    return _gmm_v2.gmm_v2(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype, transpose_rhs=transpose_rhs)


@chip_for_tracing()
def _tgmm_v2_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    return _gmm_v2.tgmm_v2(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype)


gmm_op = register("gmm", _gmm_jax)
gmm_bwd_op = register("gmm_bwd", _gmm_bwd_jax)
tgmm_op = register("tgmm", _tgmm_jax)
gmm_v2_op = register("gmm_v2", _gmm_v2_jax, no_cpu=_V2_NO_CPU)
tgmm_v2_op = register("tgmm_v2", _tgmm_v2_jax, no_cpu=_V2_NO_CPU)


# ---- Fake kernels that take symbolic sizes (torch.compile(dynamic=True)) -----------------------
@gmm_op.register_fake
def _gmm_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, transpose_rhs: bool,
              autotuning: str) -> torch.Tensor:
    return lhs.new_empty((lhs.shape[0], rhs.shape[1] if transpose_rhs else rhs.shape[2]))


@gmm_bwd_op.register_fake
def _gmm_bwd_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, grad: torch.Tensor,
                  transpose_rhs: bool, autotuning: str) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(lhs), torch.empty_like(rhs)


@tgmm_op.register_fake
def _tgmm_fake(lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor, autotuning: str) -> torch.Tensor:
    return lhs.new_empty((group_sizes.shape[0], lhs.shape[1], grad.shape[1]))


@gmm_v2_op.register_fake
def _gmm_v2_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, transpose_rhs: bool
                 ) -> torch.Tensor:
    return _gmm_fake(lhs, rhs, group_sizes, transpose_rhs, "")


@tgmm_v2_op.register_fake
def _tgmm_v2_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    return _tgmm_fake(lhs, rhs, group_sizes, "")


# ---- Autograd: upstream's VJP ------------------------------------------------------------------
def _gmm_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    lhs, rhs, group_sizes, transpose_rhs, autotuning = inputs
    ctx.save_for_backward(lhs, rhs, group_sizes)
    ctx.transpose_rhs, ctx.autotuning = transpose_rhs, autotuning  # the backward uses the forward's result


def _gmm_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    lhs, rhs, group_sizes = ctx.saved_tensors
    dlhs, drhs = gmm_bwd_op(lhs, rhs, group_sizes, grad.contiguous(), ctx.transpose_rhs, ctx.autotuning)
    return dlhs, drhs, None, None, None


gmm_op.register_autograd(_gmm_backward, setup_context=_gmm_setup)
