"""Ragged gather on Torch tensors through upstream's public op (`ops.ragged_gather`, the SparseCore
kernel): rows `x[indices]`, of which only the output rows in `[start, end)` are written.

TPU only (v6e and TPU7x, the chips with a SparseCore): JAX's Pallas TPU interpreter has no rules for
SparseCore primitives. Meta tensors (shapes only) take the fake kernel.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["ragged_gather", "ragged_gather_op"]

NO_CPU = ("no interpreter rules for SparseCore primitives: `plsc.parallel_loop` has no interpret-mode rule "
          "(jax 0.10.2: 'MLIR translation rule for primitive parallel_loop not found for platform cpu')")
# Row element widths the kernel packs into its 32-bit words (4-bit types have no Torch dtype).
DTYPES = (torch.float32, torch.int32, torch.uint32, torch.bfloat16, torch.float16, torch.int16, torch.uint16,
          torch.int8, torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2)


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _ragged_gather_jax(x: jax.Array, indices: jax.Array, start: jax.Array, end: jax.Array) -> jax.Array:
    return ops.ragged_gather(x, indices, start, end, implementation="mosaic")


ragged_gather_op = register("ragged_gather", _ragged_gather_jax, no_cpu=NO_CPU)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@ragged_gather_op.register_fake
def _ragged_gather_fake(x: torch.Tensor, indices: torch.Tensor, start: torch.Tensor, end: torch.Tensor
                        ) -> torch.Tensor:
    return x.new_empty((indices.shape[0], x.shape[1]))


# ---- What users call ---------------------------------------------------------------------------
def ragged_gather(x: torch.Tensor, indices: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """`x[indices]` for the output rows in `[start, end)`; the other rows are unspecified.

    x [in_size, hidden] with 8-, 16- or 32-bit elements; indices int32 [out_size], each in
    [0, in_size); start and end int32 [1]. Returns [out_size, hidden] in x's dtype. TPU only.
    """
    op = "ragged_gather"
    _checks.tensors(op, x=x, indices=indices, start=start, end=end)
    _checks.dtype(op, "x", x, DTYPES)
    _checks.rank(op, "x", x, (2,), "[in_size, hidden]")
    for name, t in (("indices", indices), ("start", start), ("end", end)):
        _checks.dtype(op, name, t, (torch.int32,))
    _checks.rank(op, "indices", indices, (1,), "[out_size]")
    _checks.shape(op, "start", start, (1,), "[1]")
    _checks.shape(op, "end", end, (1,), "[1]")
    return ragged_gather_op(x.contiguous(), indices.contiguous(), start.contiguous(), end.contiguous())
