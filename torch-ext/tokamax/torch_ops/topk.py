"""Exact top-k per row on Torch tensors through upstream's public op (`ops.top_k`, the SparseCore kernel):
column indices of the k largest scores of each row (unsorted, -1 past a row's length), and optionally the
selected scores as raw float32 bits.

TPU7x only (the kernel hard-codes its 16 SparseCore lanes) and TPU only: JAX's Pallas TPU interpreter has
no rules for SparseCore primitives. The kernel needs jax >= 0.11.1 (`jax.experimental.mosaic.OptLevel`);
meta tensors (shapes only) work with any jax.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["topk", "topk_op"]

CHIP = "v7x"
_NO_CPU = ("no interpreter rules for SparseCore primitives: `plsc.parallel_loop` has no interpret-mode "
           "rule, so the interpreted kernel cannot be traced")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(CHIP)
def _topk_jax(scores: jax.Array, row_lengths: jax.Array | None, k: int, return_scores: bool
              ) -> tuple[jax.Array, jax.Array]:
    """(indices, score bits); without `return_scores` the second is an empty int32 scalar, as upstream's."""
    _checks.jax_has("topk", *_checks.MOSAIC_OPT_LEVEL)
    out = ops.top_k(scores, k, row_lengths, return_scores=return_scores, implementation="mosaic_tpu")
    return out if return_scores else (out, jnp.zeros((), jnp.int32))


topk_op = register("topk", _topk_jax, no_cpu=_NO_CPU)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@topk_op.register_fake
def _topk_fake(scores: torch.Tensor, row_lengths: torch.Tensor | None, k: int, return_scores: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    indices = scores.new_empty((scores.shape[0], k), dtype=torch.int32)
    bits = scores.new_empty((scores.shape[0], k) if return_scores else (), dtype=torch.int32)
    return indices, bits


# ---- What users call ---------------------------------------------------------------------------
def topk(scores: torch.Tensor, k: int, row_lengths: torch.Tensor | None = None, *, return_scores: bool = False
         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The `k` largest scores of each row: `(indices, score_bits)`, as upstream's Torch op returns.

    scores [rows, n], float32 or int32 holding raw float32 bits; `row_lengths` (int32 [rows])
    limits each row to its first columns (default: all n). indices: int32 [rows, k], unsorted, -1
    past the row's live entries. score_bits: int32 [rows, k], the selected scores as float32 bits
    (-inf bits in padded slots) with `return_scores`, else None. TPU7x only; n: what the kernel
    takes (a multiple of its 16 lanes; it says so otherwise).
    """
    op = "topk"
    _checks.tensors(op, scores=scores, row_lengths=row_lengths, optional=("row_lengths",))
    _checks.dtype(op, "scores", scores, (torch.float32, torch.int32))
    _checks.rank(op, "scores", scores, (2,), "[rows, n]")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= scores.shape[1]:
        raise ValueError(f"tokamax {op}: k must be an int in [1, n={scores.shape[1]}], got {k!r}")
    if row_lengths is not None:
        _checks.dtype(op, "row_lengths", row_lengths, (torch.int32,))
        _checks.shape(op, "row_lengths", row_lengths, (scores.shape[0],), "[rows]")
    if not isinstance(return_scores, bool):
        raise TypeError(f"tokamax {op}: return_scores must be a bool, got {type(return_scores).__name__}")
    if scores.device.type == "tpu":  # CPU tensors are refused by the op, meta tensors need no jax
        _checks.jax_has(op, *_checks.MOSAIC_OPT_LEVEL)
    indices, bits = topk_op(scores.contiguous(), None if row_lengths is None else row_lengths.contiguous(), k,
                            return_scores)
    return indices, (bits if return_scores else None)
