"""Grouped matmuls on Torch tensors: `gmm`, `tgmm` and `ragged_dot` through upstream's public ragged
dot (config per chip and shape, the Mosaic kernel or upstream's XLA fallback, autograd through
upstream's VJP), and `gmm_v2` / `tgmm_v2` on the v2 kernels (TPU only).

Upstream's own Torch `ragged_dot` wraps the v2 Op; ours runs the public `ragged_dot`, as a JAX user's
call does, which runs on CPU tensors too (the v2 kernels do not run in JAX's interpreter).

The custom ops, their JAX functions and autograd are `_grouped_ops`'; an autotuning result applied with
`tokamax.tuning` reaches them through the token each takes.
"""

from __future__ import annotations

import torch

from . import _checks, _sharding, _tuned
from ._grouped_ops import (
    _gmm_bwd_jax,  # noqa: F401 - the family's JAX functions, found through its family module
    _gmm_jax,  # noqa: F401
    _tgmm_jax,  # noqa: F401
    gmm_bwd_op,
    gmm_op,
    gmm_v2_op,
    tgmm_op,
    tgmm_v2_op,
)

__all__ = ["gmm", "gmm_bwd_op", "gmm_op", "gmm_v2", "gmm_v2_op", "ragged_dot", "tgmm", "tgmm_op", "tgmm_v2",
           "tgmm_v2_op"]

# ---- What users call ---------------------------------------------------------------------------
_tuning_token = _tuned.current_token  # these ops name their token themselves (it predates `_tuned`)

def _check_gmm(op: str, lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, transpose_rhs: bool
               ) -> None:
    _checks.tensors(op, lhs=lhs, rhs=rhs, group_sizes=group_sizes)
    _checks.floats(op, lhs=lhs, rhs=rhs)
    _checks.rank(op, "lhs", lhs, (2,), "[m, k]")
    _checks.rank(op, "rhs", rhs, (3,), "[groups, n, k]" if transpose_rhs else "[groups, k, n]")
    k = rhs.shape[2] if transpose_rhs else rhs.shape[1]
    if lhs.shape[1] != k:
        raise ValueError(f"tokamax {op}: lhs has k={lhs.shape[1]} columns but rhs has k={k} "
                         f"(shapes {tuple(lhs.shape)} and {tuple(rhs.shape)}, transpose_rhs={transpose_rhs})")
    _checks.group_sizes(op, group_sizes, rhs.shape[0], lhs.shape[0])


def _check_tgmm(op: str, lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor, grad_name: str) -> None:
    _checks.tensors(op, lhs=lhs, **{grad_name: grad}, group_sizes=group_sizes)
    _checks.floats(op, lhs=lhs, **{grad_name: grad})
    _checks.rank(op, "lhs", lhs, (2,), "[m, k]")
    _checks.rank(op, grad_name, grad, (2,), "[m, n]")
    _checks.same(op, "the row counts m", lhs=lhs.shape[0], **{grad_name: grad.shape[0]})
    if group_sizes.dim() != 1:
        raise ValueError(f"tokamax {op}: group_sizes must be 1-D, got shape {tuple(group_sizes.shape)}")
    _checks.group_sizes(op, group_sizes, group_sizes.shape[0], lhs.shape[0])


def gmm(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, *, transpose_rhs: bool = False
        ) -> torch.Tensor:
    """Grouped matmul: rows of `lhs` in group g times `rhs[g]`; differentiable in lhs and rhs.

    lhs [m, k]; rhs [groups, k, n] ([groups, n, k] with `transpose_rhs`); group_sizes int32
    [groups], non-negative, summing to at most m: rows past the sum come back zero, forward and in dlhs (upstream's
    Mosaic kernel leaves them unwritten; this package's port zeroes them, as the XLA fallback does). Sizes are
    refused on CPU tensors where wrong; on TPU tensors (not read back) they are clipped to the rows, unflagged
    (torch-tpu exports the function and `jax.export` takes no host callback). m = 0 gives [0, n]. bf16 or f32;
    any sizes the public op takes (the Mosaic kernel where it takes them, else upstream's XLA fallback).
    """
    _check_gmm("gmm", lhs, rhs, group_sizes, transpose_rhs)
    if _sharding.is_dtensor(rhs):  # experts split over ranks: each rank's rows to its experts
        from ._sharding import grouped_matmul

        if grouped_matmul.wants_experts_split(lhs, rhs, group_sizes):
            return grouped_matmul.experts_split_gmm(lhs, rhs, group_sizes, transpose_rhs=transpose_rhs)
    return gmm_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous(), transpose_rhs, _tuning_token())


def ragged_dot(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Upstream's `ragged_dot(lhs, rhs, group_sizes)` on Torch tensors: `gmm` without transposition."""
    _check_gmm("ragged_dot", lhs, rhs, group_sizes, False)
    return gmm_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous(), False, _tuning_token())


def tgmm(lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Per-group `lhs[rows of g].T @ grad[rows of g]`: lhs [m, k], grad [m, n] -> [groups, k, n]."""
    _check_tgmm("tgmm", lhs, grad, group_sizes, "grad")
    return tgmm_op(lhs.contiguous(), grad.contiguous(), group_sizes.contiguous(), _tuning_token())


def gmm_v2(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, *, transpose_rhs: bool = False
           ) -> torch.Tensor:
    """Grouped matmul with the v2 kernel (TPU only: JAX's interpreter cannot run it on CPU; jax >= 0.11.1)."""
    _checks.jax_has("gmm_v2", *_checks.TENSORCORE_MESH)
    _check_gmm("gmm_v2", lhs, rhs, group_sizes, transpose_rhs)
    return gmm_v2_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous(), transpose_rhs)


def tgmm_v2(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Per-group `lhs_g^T @ rhs_g` with the v2 kernel (TPU only; jax >= 0.11.1): lhs [m, k], rhs [m, n]."""
    _checks.jax_has("tgmm_v2", *_checks.TENSORCORE_MESH)
    _check_tgmm("tgmm_v2", lhs, rhs, group_sizes, "rhs")
    return tgmm_v2_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous())
