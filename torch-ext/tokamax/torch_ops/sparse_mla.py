"""Sparse multi-head latent attention on Torch tensors (`sparse_mla`, DeepSeek-V4 CSA: gather each token's
top-k KV entries from the paged cache, attend to them and merge with a sliding-window partial result and
attention sinks) through upstream's public op (`ops.sparse_mla`, the Mosaic kernels). Forward only (upstream
registers no backward).

TPU7x only, as upstream's Op (generation 7 with a SparseCore, which runs the gather): JAX's Pallas TPU
interpreter cannot run the kernels on CPU (see `_NO_CPU`); CPU calls say so. Meta and fake tensors give
shapes (`torch.compile(dynamic=True)` over the token count).
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["sparse_mla", "sparse_mla_op"]

_CHIP = "v7x"
_NO_CPU = ("the SparseCore gather DMAs rows by a vector of row ids (`pl.Indirect`), which the interpreter's "
           "`dma_start` cannot take (TypeError: Only scalar arrays can be converted to Python scalars), and the "
           "attention kernel DMAs from bitcast views of the caches (AttributeError: 'BitcastTransform' object has "
           "no attribute 'indices')")
_HEAD_DIM = 512  # what upstream's Op takes: 448 fp8 NoPE bytes + 64 bf16 RoPE values per token, as read


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(_CHIP)
def _sparse_mla_jax(q: jax.Array, cache_kv_nope: jax.Array, cache_kv_rope: jax.Array, topk_indices: jax.Array,
                    page_indices: jax.Array, cu_q_lens: jax.Array, distribution: jax.Array,
                    attention_sinks: jax.Array, swa_accumution: jax.Array, swa_l: jax.Array, swa_m: jax.Array,
                    sm_scale: float) -> jax.Array:
    return ops.sparse_mla(q, cache_kv_nope, cache_kv_rope, topk_indices, page_indices, cu_q_lens, distribution,
                          attention_sinks, swa_accumution, swa_l, swa_m, sm_scale=sm_scale,
                          implementation="mosaic_tpu")


sparse_mla_op = register("sparse_mla", _sparse_mla_jax, no_cpu=_NO_CPU)


# ---- Fake kernel that takes symbolic sizes ----------------------------------------------------
@sparse_mla_op.register_fake
def _sparse_mla_fake(q: torch.Tensor, cache_kv_nope: torch.Tensor, cache_kv_rope: torch.Tensor,
                     topk_indices: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                     distribution: torch.Tensor, attention_sinks: torch.Tensor, swa_accumution: torch.Tensor,
                     swa_l: torch.Tensor, swa_m: torch.Tensor, sm_scale: float) -> torch.Tensor:
    return q.new_empty(q.shape)  # the output has q's shape and dtype


# ---- What users call ---------------------------------------------------------------------------
def _check(q: torch.Tensor, cache_kv_nope: torch.Tensor, cache_kv_rope: torch.Tensor, topk_indices: torch.Tensor,
           page_indices: torch.Tensor, cu_q_lens: torch.Tensor, distribution: torch.Tensor,
           attention_sinks: torch.Tensor, swa_accumution: torch.Tensor, swa_l: torch.Tensor,
           swa_m: torch.Tensor) -> None:
    op = "sparse_mla"
    _checks.tensors(op, q=q, cache_kv_nope=cache_kv_nope, cache_kv_rope=cache_kv_rope, topk_indices=topk_indices,
                    page_indices=page_indices, cu_q_lens=cu_q_lens, distribution=distribution,
                    attention_sinks=attention_sinks, swa_accumution=swa_accumution, swa_l=swa_l, swa_m=swa_m)
    _checks.floats(op, q=q, swa_accumution=swa_accumution)
    _checks.shape(op, "q", q, (None, None, _HEAD_DIM), "[tokens, heads, head_dim]")
    if swa_accumution.shape != q.shape:
        raise ValueError(f"tokamax {op}: swa_accumution must have q's shape {tuple(q.shape)}, "
                         f"got {tuple(swa_accumution.shape)}")
    for name, t in (("swa_l", swa_l), ("swa_m", swa_m)):
        _checks.dtype(op, name, t, _checks.FLOATS)
        _checks.shape(op, name, t, (q.shape[0], q.shape[1]), "[tokens, heads]")
    _checks.dtype(op, "attention_sinks", attention_sinks, _checks.FLOATS)
    _checks.shape(op, "attention_sinks", attention_sinks, (q.shape[1],), "[heads]")
    for name, t, layout in (("cache_kv_nope", cache_kv_nope, "[pages, page_size, 128]"),
                            ("cache_kv_rope", cache_kv_rope, "[pages, page_size / 4, 128]")):
        _checks.dtype(op, name, t, (torch.int32,))
        _checks.shape(op, name, t, (None, None, 128), layout)
    _checks.same(op, "the page counts", cache_kv_nope=cache_kv_nope.shape[0], cache_kv_rope=cache_kv_rope.shape[0])
    if cache_kv_nope.shape[1] != 4 * cache_kv_rope.shape[1]:
        raise ValueError(f"tokamax {op}: cache_kv_rope must hold four tokens per row: cache_kv_nope has pages of "
                         f"{cache_kv_nope.shape[1]} tokens, cache_kv_rope {cache_kv_rope.shape[1]} rows")
    _checks.dtype(op, "topk_indices", topk_indices, (torch.int32,))
    _checks.shape(op, "topk_indices", topk_indices, (q.shape[0], None), "[tokens, topk]")
    if topk_indices.shape[1] % 128 != 0:
        raise ValueError(f"tokamax {op}: topk (topk_indices' last size) must be a multiple of 128, got "
                         f"{topk_indices.shape[1]}")
    for name, t, layout in (("page_indices", page_indices, "[max_num_seqs * pages_per_seq]"),
                            ("cu_q_lens", cu_q_lens, "[max_num_seqs + 1]"), ("distribution", distribution, "[3]")):
        _checks.dtype(op, name, t, (torch.int32,))
        _checks.rank(op, name, t, (1,), layout)
    _checks.shape(op, "distribution", distribution, (3,), "[3]")


def sparse_mla(q: torch.Tensor, cache_kv_nope: torch.Tensor, cache_kv_rope: torch.Tensor, topk_indices: torch.Tensor,
               page_indices: torch.Tensor, cu_q_lens: torch.Tensor, distribution: torch.Tensor,
               attention_sinks: torch.Tensor, swa_accumution: torch.Tensor, swa_l: torch.Tensor, swa_m: torch.Tensor,
               *, sm_scale: float = 1.0) -> torch.Tensor:
    """Sparse MLA (upstream's public op, its Mosaic kernels; TPU7x): each query token attends to its top-k
    KV entries, merged with a sliding-window attention partial result and per-head attention sinks.

    q [tokens, heads, 512] (bf16 or f32); the int32-word caches, page by page: cache_kv_nope [pages,
    page_size, 128] (448 fp8 NoPE bytes + 64 UE8M0 scales per token) and cache_kv_rope [pages, page_size / 4,
    128] (64 bf16 RoPE values per token, four tokens per row); topk_indices int32 [tokens, topk] (topk a
    multiple of 128; -1 padded); page_indices int32 [max_num_seqs * pages_per_seq]; cu_q_lens int32
    [max_num_seqs + 1]; distribution int32 [3] (cumulative decode, prefill-only and mixed sequence counts);
    attention_sinks [heads] (sink logits); the sliding-window partial result: swa_accumution (upstream's
    spelling) with q's shape and dtype (the unnormalised numerator), swa_l and swa_m [tokens, heads] (its
    denominator and row max). Returns q's shape and dtype. The gather chunk, kernel batch and VMEM limit are
    upstream's config choice (upstream's `configs` is not taken).
    """
    _check(q, cache_kv_nope, cache_kv_rope, topk_indices, page_indices, cu_q_lens, distribution, attention_sinks,
           swa_accumution, swa_l, swa_m)
    return sparse_mla_op(*(t.contiguous() for t in (q, cache_kv_nope, cache_kv_rope, topk_indices, page_indices,
                                                    cu_q_lens, distribution, attention_sinks, swa_accumution, swa_l,
                                                    swa_m)), float(sm_scale))
