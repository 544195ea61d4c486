"""Ragged gather reduce (the MoE output combine) on Torch tensors through upstream's public op
(`ops.ragged_gather_reduce`, the SparseCore kernel): output token t sums, over its `reduce_group_size`
routes r with `valid_rows_mask[r]`, `topk_weights[r] * x[indices[r]]`, accumulated in float32.

TPU7x only (the kernel needs 16 SparseCore lanes) and TPU only: JAX's Pallas TPU interpreter has no
rules for SparseCore primitives. Upstream's op runs its pure-JAX reference instead of the kernel for an
`x` small against VMEM. Meta tensors (shapes only) take the fake kernel.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["ragged_gather_reduce", "ragged_gather_reduce_op"]

CHIP = "v7x"
NO_CPU = ("no interpreter rules for SparseCore primitives: `plsc.parallel_loop` has no interpret-mode rule "
          "(jax 0.10.2: 'MLIR translation rule for primitive parallel_loop not found for platform cpu')")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(CHIP)
def _ragged_gather_reduce_jax(x: jax.Array, indices: jax.Array, topk_weights: jax.Array, valid_rows_mask: jax.Array,
                              reduce_group_size: int) -> jax.Array:
    return ops.ragged_gather_reduce(x, indices, topk_weights, valid_rows_mask, reduce_group_size,
                                    implementation="mosaic_tpu")


ragged_gather_reduce_op = register("ragged_gather_reduce", _ragged_gather_reduce_jax, no_cpu=NO_CPU)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@ragged_gather_reduce_op.register_fake
def _ragged_gather_reduce_fake(x: torch.Tensor, indices: torch.Tensor, topk_weights: torch.Tensor,
                               valid_rows_mask: torch.Tensor, reduce_group_size: int) -> torch.Tensor:
    return x.new_empty((indices.shape[0] // reduce_group_size, x.shape[1]))


# ---- What users call ---------------------------------------------------------------------------
def ragged_gather_reduce(x: torch.Tensor, indices: torch.Tensor, topk_weights: torch.Tensor,
                         valid_rows_mask: torch.Tensor, reduce_group_size: int) -> torch.Tensor:
    """The MoE combine: [routes // reduce_group_size, hidden] bf16, token t summing its routes
    `t * reduce_group_size ...` weighted, skipping invalid ones (a token without any is zero).

    x [rows, hidden] bf16 (expert outputs; hidden a multiple of 128); indices int32 [routes] (rows
    of x); topk_weights [routes] bf16 or f32; valid_rows_mask bool [routes]; routes a multiple of
    reduce_group_size (the MoE top-k). TPU7x only.
    """
    op = "ragged_gather_reduce"
    _checks.tensors(op, x=x, indices=indices, topk_weights=topk_weights, valid_rows_mask=valid_rows_mask)
    _checks.dtype(op, "x", x, (torch.bfloat16,))
    _checks.rank(op, "x", x, (2,), "[rows, hidden]")
    _checks.dtype(op, "indices", indices, (torch.int32,))
    _checks.rank(op, "indices", indices, (1,), "[routes]")
    _checks.dtype(op, "topk_weights", topk_weights, (torch.bfloat16, torch.float32))
    _checks.shape(op, "topk_weights", topk_weights, (indices.shape[0],), "[routes]")
    _checks.dtype(op, "valid_rows_mask", valid_rows_mask, (torch.bool,))
    _checks.shape(op, "valid_rows_mask", valid_rows_mask, (indices.shape[0],), "[routes]")
    if not isinstance(reduce_group_size, int) or isinstance(reduce_group_size, bool) or reduce_group_size < 1:
        raise ValueError(f"tokamax {op}: reduce_group_size must be a positive int, got {reduce_group_size!r}")
    if indices.shape[0] % reduce_group_size != 0:
        raise ValueError(f"tokamax {op}: the {indices.shape[0]} routes must be a multiple of "
                         f"reduce_group_size={reduce_group_size}")
    return ragged_gather_reduce_op(x.contiguous(), indices.contiguous(), topk_weights.contiguous(),
                                   valid_rows_mask.contiguous(), reduce_group_size)
