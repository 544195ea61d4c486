"""DeepSeek-V4 CSA cache gather on Torch tensors through upstream's public op (`ops.csa_gather`, the
SparseCore kernel): the NoPE and RoPE cache rows of the given tokens, in the layout upstream's sparse
attention consumes.

TPU only (v6e and TPU7x, the chips with a SparseCore): JAX's Pallas TPU interpreter cannot run the
kernel's indirect (gather) DMAs. Meta tensors (shapes only) take the fake kernel.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["csa_gather", "csa_gather_op"]

NO_CPU = ("its SparseCore gather DMAs index with a vector of rows, which the interpreter's `dma_start` "
          "turns into Python ints: 'Only scalar arrays can be converted to Python scalars'")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(upstream="CsaGather", op="csa_gather")
def _csa_gather_jax(nope_cache: jax.Array, rope_cache: jax.Array, indices: jax.Array,
                    num_valid_indices: jax.Array | None, top_k: int) -> tuple[jax.Array, jax.Array]:
    return ops.csa_gather(nope_cache, rope_cache, indices, num_valid_indices, top_k=top_k,
                          implementation="mosaic_tpu")


csa_gather_op = register("csa_gather", _csa_gather_jax, no_cpu=NO_CPU)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@csa_gather_op.register_fake
def _csa_gather_fake(nope_cache: torch.Tensor, rope_cache: torch.Tensor, indices: torch.Tensor,
                     num_valid_indices: torch.Tensor | None, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = indices.shape[0]
    return nope_cache.new_empty((n, nope_cache.shape[2])), rope_cache.new_empty((n // 4, rope_cache.shape[2]))


# ---- What users call ---------------------------------------------------------------------------
def csa_gather(nope_cache: torch.Tensor, rope_cache: torch.Tensor, indices: torch.Tensor,
               num_valid_indices: torch.Tensor | int | None = None, *, top_k: int = 1024
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSA cache rows of `indices`: `(nope_out, rope_out)`, int32 [N, 128] and [N // 4, 128].

    nope_cache int32 [pages, page_size, 128]; rope_cache int32 [pages, page_size // 4, 128];
    indices int32 [N], token indices into the caches, N a multiple of `top_k` (the attention
    kernel's top-k, a positive multiple of 128). `num_valid_indices` (int32 [1], or an int): how
    many leading indices are valid (a multiple of top_k); output rows past them are unspecified.
    TPU only.
    """
    op = "csa_gather"
    _checks.tensors(op, nope_cache=nope_cache, rope_cache=rope_cache, indices=indices)
    if isinstance(num_valid_indices, int) and not isinstance(num_valid_indices, bool):
        num_valid_indices = torch.full((1,), num_valid_indices, dtype=torch.int32, device=indices.device)
    _checks.tensors(op, indices=indices, num_valid_indices=num_valid_indices, optional=("num_valid_indices",))
    for name, t in (("nope_cache", nope_cache), ("rope_cache", rope_cache), ("indices", indices)):
        _checks.dtype(op, name, t, (torch.int32,))
    _checks.rank(op, "nope_cache", nope_cache, (3,), "[pages, page_size, 128]")
    pages, page_size = nope_cache.shape[0], nope_cache.shape[1]
    _checks.shape(op, "nope_cache", nope_cache, (None, None, 128), "[pages, page_size, 128]")
    _checks.shape(op, "rope_cache", rope_cache, (pages, page_size // 4, 128), "[pages, page_size // 4, 128]")
    _checks.rank(op, "indices", indices, (1,), "[N]")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k <= 0 or top_k % 128:
        raise ValueError(f"tokamax {op}: top_k must be a positive multiple of 128, got {top_k!r}")
    if indices.shape[0] % top_k != 0:
        raise ValueError(f"tokamax {op}: the number of indices ({indices.shape[0]}) must be a multiple of "
                         f"top_k={top_k}")
    if num_valid_indices is not None:
        _checks.dtype(op, "num_valid_indices", num_valid_indices, (torch.int32,))
        _checks.shape(op, "num_valid_indices", num_valid_indices, (1,), "[1]")
    return csa_gather_op(nope_cache.contiguous(), rope_cache.contiguous(), indices.contiguous(),
                         None if num_valid_indices is None else num_valid_indices.contiguous(), top_k)
