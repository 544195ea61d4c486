"""Masked-dense multi-head latent attention on Torch tensors (`masked_dense_mla`, DeepSeek-V4 CSA over the
whole fp8 paged KV cache, masked to the indexer's top-k) through upstream's public op (`ops.masked_dense_mla`,
the Mosaic kernel). Forward only (upstream registers no backward).

TPU7x only, as upstream's Op (generation 7 with a SparseCore, which builds the top-k mask): JAX's Pallas TPU
interpreter cannot run the kernel on CPU (see `_NO_CPU`); CPU calls say so. Meta and fake tensors give
shapes (`torch.compile(dynamic=True)` over the token count).
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["masked_dense_mla", "masked_dense_mla_op"]

_CHIP = "v7x"
_NO_CPU = ("the kernel DMAs KV pages from `reshape`d views of its HBM caches, and the interpreter resolves DMA refs "
           "only through integer/slice indexers: AttributeError: 'ReshapeTransform' object has no attribute "
           "'indices'")
_HEAD_DIM = 576  # 512 NoPE + 64 RoPE, the caches' layout (the kernel refuses other sizes)

# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(_CHIP)
def _masked_dense_mla_jax(q: jax.Array, cache_kv_nope: jax.Array, cache_kv_rope: jax.Array, kv_lens: jax.Array,
                          topk_indices: jax.Array, page_indices: jax.Array, cu_q_lens: jax.Array,
                          distribution: jax.Array, sequence_start: jax.Array | None, sm_scale: float,
                          k_scale: float, mask_value: float | None, max_kv_len: int | None,
                          chunk_prefill_size: int | None) -> jax.Array:
    return ops.masked_dense_mla(q, cache_kv_nope, cache_kv_rope, kv_lens, topk_indices, page_indices, cu_q_lens,
                                distribution, sm_scale=sm_scale, k_scale=k_scale, mask_value=mask_value,
                                max_kv_len=max_kv_len, chunk_prefill_size=chunk_prefill_size,
                                sequence_start=sequence_start, implementation="mosaic")


masked_dense_mla_op = register("masked_dense_mla", _masked_dense_mla_jax, no_cpu=_NO_CPU)


# ---- Fake kernel that takes symbolic sizes ----------------------------------------------------
@masked_dense_mla_op.register_fake
def _masked_dense_mla_fake(q: torch.Tensor, cache_kv_nope: torch.Tensor, cache_kv_rope: torch.Tensor,
                           kv_lens: torch.Tensor, topk_indices: torch.Tensor, page_indices: torch.Tensor,
                           cu_q_lens: torch.Tensor, distribution: torch.Tensor, sequence_start: torch.Tensor | None,
                           sm_scale: float, k_scale: float, mask_value: float | None, max_kv_len: int | None,
                           chunk_prefill_size: int | None) -> torch.Tensor:
    return q.new_empty(q.shape)  # the output has q's shape and dtype


# ---- What users call ---------------------------------------------------------------------------
def masked_dense_mla(q: torch.Tensor, cache_kv_nope: torch.Tensor, cache_kv_rope: torch.Tensor, kv_lens: torch.Tensor,
                     topk_indices: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                     distribution: torch.Tensor, *, sm_scale: float = 1.0, k_scale: float = 1.0,
                     mask_value: float | None = None, max_kv_len: int | None = None,
                     chunk_prefill_size: int | None = None, sequence_start: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """Masked-dense MLA (upstream's public op, its Mosaic kernel; TPU7x): attention of each query token over
    its sequence's whole fp8 KV cache, masked causally and to the token's top-k selection.

    q [tokens, heads, 576] (bf16 or f32; 512 NoPE + 64 RoPE dims, as the caches hold them); the uint8 fp8
    caches, page by page: cache_kv_nope [pages, page_size, 4, 128] (512 NoPE bytes per token) and
    cache_kv_rope [pages, page_size / 4, 4, 128] (the RoPE bytes, four tokens per row); int32 kv_lens
    [max_num_seqs] (kv lengths including this step's tokens), topk_indices [tokens, topk] (selected kv
    positions, -1 padded), page_indices [max_num_seqs * pages_per_seq], cu_q_lens [max_num_seqs + 1],
    distribution [3] (cumulative decode, prefill-only and mixed sequence counts); sequence_start an int32
    scalar (first sequence to attend). `k_scale` dequantizes the caches; `max_kv_len` bounds every kv length;
    `chunk_prefill_size` is a static query length for the prefill-only sequences. Returns q's shape and
    dtype. The kernel's blocking and VMEM limit are upstream's config choice (upstream's `configs` is not taken).
    """
    op = "masked_dense_mla"
    index = {"kv_lens": kv_lens, "page_indices": page_indices, "cu_q_lens": cu_q_lens, "distribution": distribution}
    _checks.tensors(op, q=q, cache_kv_nope=cache_kv_nope, cache_kv_rope=cache_kv_rope, topk_indices=topk_indices,
                    **index, sequence_start=sequence_start,
                    optional=("sequence_start",))
    _checks.floats(op, q=q)
    _checks.shape(op, "q", q, (None, None, _HEAD_DIM), "[tokens, heads, head_dim]")
    for name, t, layout in (("cache_kv_nope", cache_kv_nope, "[pages, page_size, 4, 128]"),
                            ("cache_kv_rope", cache_kv_rope, "[pages, page_size / 4, 4, 128]")):
        _checks.dtype(op, name, t, (torch.uint8,))
        _checks.shape(op, name, t, (None, None, 4, 128), layout)
    _checks.same(op, "the page counts", cache_kv_nope=cache_kv_nope.shape[0], cache_kv_rope=cache_kv_rope.shape[0])
    if cache_kv_nope.shape[1] != 4 * cache_kv_rope.shape[1]:
        raise ValueError(f"tokamax {op}: cache_kv_rope must hold four tokens per row: cache_kv_nope has pages of "
                         f"{cache_kv_nope.shape[1]} tokens, cache_kv_rope {cache_kv_rope.shape[1]} rows")
    _checks.dtype(op, "topk_indices", topk_indices, (torch.int32,))
    _checks.rank(op, "topk_indices", topk_indices, (2,), "[tokens, topk]")
    _checks.same(op, "the token counts", q=q.shape[0], topk_indices=topk_indices.shape[0])
    _checks.paged_metadata(op, "kv_lens", kv_lens, page_indices, cu_q_lens, distribution)
    if sequence_start is not None:
        _checks.dtype(op, "sequence_start", sequence_start, (torch.int32,))
        _checks.shape(op, "sequence_start", sequence_start, (), "a scalar")
    if max_kv_len is not None:
        _checks.positive(op, "max_kv_len", max_kv_len)
    return masked_dense_mla_op(
        q.contiguous(), cache_kv_nope.contiguous(), cache_kv_rope.contiguous(), kv_lens.contiguous(),
        topk_indices.contiguous(), page_indices.contiguous(), cu_q_lens.contiguous(), distribution.contiguous(),
        None if sequence_start is None else sequence_start.contiguous(), float(sm_scale), float(k_scale),
        None if mask_value is None else float(mask_value), max_kv_len, chunk_prefill_size)
