"""The lightning indexer on Torch tensors (`lightning_indexer`, DeepSeek-V4's top-k KV selection: score every
cached fp8 key per query token, keep the top k) through upstream's public op (`ops.lightning_indexer`, the
Mosaic scoring kernel and the SparseCore top-k). Forward only (upstream registers no backward).

TPU7x only, as upstream's Op (generation 7; its top-k runs on the SparseCore): JAX's Pallas TPU interpreter
cannot run the SparseCore stage on CPU (see `_NO_CPU`); CPU calls say so. Tracing it needs jax >= 0.11.1
(`jax.experimental.mosaic.OptLevel`, which the SparseCore top-k passes); with an older jax the functions
say so before anything runs. Meta and fake tensors give shapes (`torch.compile(dynamic=True)` over the
token count).
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["lightning_indexer", "lightning_indexer_op", "lightning_indexer_scores_op"]

_CHIP = "v7x"
_NO_CPU = ("the interpreter has no rules for the SparseCore primitives of its top-k (`plsc.parallel_loop`): "
           "ValueError: JaxprInputEffect ... does not have a corresponding jaxpr input")
_KV_LAYOUTS = ("head_along_sublane", "seq_along_lane")

# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
def _indexer_public(q: jax.Array, indexer_weights: jax.Array, cache_kv: jax.Array, seq_lens: jax.Array,
                    page_indices: jax.Array, cu_q_lens: jax.Array, distribution: jax.Array, k: int,
                    compression_ratio: int, kv_layout: str, cp_size: int, cp_rank: int, interleave_size: int,
                    return_scores: bool) -> jax.Array | tuple[jax.Array, jax.Array]:
    return ops.lightning_indexer(q, indexer_weights, cache_kv, seq_lens, page_indices, cu_q_lens, distribution,
                                 k=k, compression_ratio=compression_ratio, kv_layout=kv_layout, cp_size=cp_size,
                                 cp_rank=cp_rank, interleave_size=interleave_size, return_scores=return_scores,
                                 implementation="mosaic")


@chip_for_tracing(_CHIP)
def _lightning_indexer_jax(q: jax.Array, indexer_weights: jax.Array, cache_kv: jax.Array, seq_lens: jax.Array,
                           page_indices: jax.Array, cu_q_lens: jax.Array, distribution: jax.Array, k: int,
                           compression_ratio: int, kv_layout: str, cp_size: int, cp_rank: int,
                           interleave_size: int) -> jax.Array:
    return _indexer_public(q, indexer_weights, cache_kv, seq_lens, page_indices, cu_q_lens, distribution, k,
                           compression_ratio, kv_layout, cp_size, cp_rank, interleave_size, False)


@chip_for_tracing(_CHIP)
def _lightning_indexer_scores_jax(q: jax.Array, indexer_weights: jax.Array, cache_kv: jax.Array,
                                  seq_lens: jax.Array, page_indices: jax.Array, cu_q_lens: jax.Array,
                                  distribution: jax.Array, k: int, compression_ratio: int, kv_layout: str,
                                  cp_size: int, cp_rank: int, interleave_size: int
                                  ) -> tuple[jax.Array, jax.Array]:
    return _indexer_public(q, indexer_weights, cache_kv, seq_lens, page_indices, cu_q_lens, distribution, k,
                           compression_ratio, kv_layout, cp_size, cp_rank, interleave_size, True)


lightning_indexer_op = register("lightning_indexer", _lightning_indexer_jax, no_cpu=_NO_CPU)
lightning_indexer_scores_op = register("lightning_indexer_scores", _lightning_indexer_scores_jax, no_cpu=_NO_CPU)


# ---- Fake kernels that take symbolic sizes ----------------------------------------------------
@lightning_indexer_op.register_fake
def _lightning_indexer_fake(q: torch.Tensor, indexer_weights: torch.Tensor, cache_kv: torch.Tensor,
                            seq_lens: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                            distribution: torch.Tensor, k: int, compression_ratio: int, kv_layout: str, cp_size: int,
                            cp_rank: int, interleave_size: int) -> torch.Tensor:
    return q.new_empty((q.shape[0], k), dtype=torch.int32)  # kv positions per token, -1 padded


@lightning_indexer_scores_op.register_fake
def _lightning_indexer_scores_fake(q: torch.Tensor, indexer_weights: torch.Tensor, cache_kv: torch.Tensor,
                                   seq_lens: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                                   distribution: torch.Tensor, k: int, compression_ratio: int, kv_layout: str,
                                   cp_size: int, cp_rank: int, interleave_size: int
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (q.shape[0], k)  # the scores come as int32 words holding the f32 bits
    return q.new_empty(shape, dtype=torch.int32), q.new_empty(shape, dtype=torch.int32)


# ---- What users call ---------------------------------------------------------------------------
def _check(q: torch.Tensor, indexer_weights: torch.Tensor, cache_kv: torch.Tensor, index: dict[str, torch.Tensor],
           k: int, compression_ratio: int, kv_layout: str, cp_size: int, cp_rank: int) -> None:
    op = "lightning_indexer"
    _checks.tensors(op, q=q, indexer_weights=indexer_weights, cache_kv=cache_kv, **index)
    _checks.floats(op, q=q)
    _checks.dtype(op, "indexer_weights", indexer_weights, _checks.FLOATS)
    _checks.rank(op, "q", q, (3,), "[tokens, heads, head_dim]")
    _checks.shape(op, "indexer_weights", indexer_weights, (q.shape[0], q.shape[1]), "[tokens, heads]")
    _checks.dtype(op, "cache_kv", cache_kv, (torch.uint8,))
    _checks.rank(op, "cache_kv", cache_kv, (4,), "[pages, page_size / 4, 4, record_bytes] (head_along_sublane) "
                 "or 4-D as upstream's seq_along_lane layout")
    _checks.paged_metadata(op, "seq_lens", *index.values())
    if not (isinstance(k, int) and 0 < k <= 4096 and k % 16 == 0):
        raise ValueError(f"tokamax {op}: k must be a positive multiple of 16, at most 4096 (upstream's SparseCore "
                         f"top-k), got {k!r}")
    if not (isinstance(compression_ratio, int) and compression_ratio > 0
            and compression_ratio & (compression_ratio - 1) == 0):
        raise ValueError(f"tokamax {op}: compression_ratio must be a power of 2, got {compression_ratio!r}")
    _checks.choice(op, "kv_layout", kv_layout, _KV_LAYOUTS)
    _checks.positive(op, "cp_size", cp_size)
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"tokamax {op}: cp_rank must be in [0, cp_size = {cp_size}), got {cp_rank}")


def lightning_indexer(q: torch.Tensor, indexer_weights: torch.Tensor, cache_kv: torch.Tensor, seq_lens: torch.Tensor,
                      page_indices: torch.Tensor, cu_q_lens: torch.Tensor, distribution: torch.Tensor, k: int, *,
                      compression_ratio: int = 1, kv_layout: str = "head_along_sublane", cp_size: int = 1,
                      cp_rank: int | torch.Tensor = 0, interleave_size: int = 1, return_scores: bool = False
                      ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The lightning indexer (upstream's public op, its Mosaic and SparseCore kernels; TPU7x, jax >= 0.11.1):
    the top `k` compressed kv positions per query token, by the weighted ReLU of q . key summed over heads.

    q [tokens, heads, head_dim] and indexer_weights [tokens, heads] (bf16 or f32); cache_kv the uint8 paged
    cache of fp8 key records (head_dim key bytes, then the UE8M0 scale byte, padded to 128 bytes), in
    `kv_layout` "head_along_sublane" [pages, page_size / 4, 4, record_bytes] or "seq_along_lane"; int32
    seq_lens [max_num_seqs] (uncompressed kv lengths), page_indices [max_num_seqs * pages_per_seq],
    cu_q_lens [max_num_seqs + 1], distribution [3] (cumulative decode, prefill-only and mixed sequence
    counts). `k` a multiple of 16, at most 4096; `compression_ratio` a power of 2; context parallelism with
    `cp_size`, `cp_rank` (an int; a tensor is read on the host, as upstream's Torch op does) and
    `interleave_size`.

    Returns int32 indices [tokens, k] (-1 padded), or with `return_scores` `(indices, scores)`, scores int32
    [tokens, k] holding the f32 bits as upstream returns them (`scores.view(torch.float32)`). The kernel's
    blocking, buffering and VMEM limit are upstream's config choice (upstream's `config`/`configs` are not
    taken).
    """
    op = "lightning_indexer"
    if isinstance(cp_rank, torch.Tensor):
        cp_rank = int(cp_rank.item())
    index = {"seq_lens": seq_lens, "page_indices": page_indices, "cu_q_lens": cu_q_lens, "distribution": distribution}
    _check(q, indexer_weights, cache_kv, index, k, compression_ratio, kv_layout, cp_size, cp_rank)
    _checks.jax_has(op, *_checks.MOSAIC_OPT_LEVEL)
    tensors = (q, indexer_weights, cache_kv, *index.values())
    args = (*(t.contiguous() for t in tensors), k, compression_ratio, kv_layout, cp_size, cp_rank, interleave_size)
    return lightning_indexer_scores_op(*args) if return_scores else lightning_indexer_op(*args)
