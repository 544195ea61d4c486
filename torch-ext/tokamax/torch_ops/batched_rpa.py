"""Batched ragged paged attention on Torch tensors (`batched_rpa`): mixed decode/prefill attention over a
paged KV cache through upstream's public op (`ops.batched_ragged_paged_attention`, the Mosaic kernel), which
also writes the new keys and values into the cache. Forward only (upstream registers no backward).

On TPU (v5e and newer, as upstream's Op) the Mosaic kernel runs. JAX's Pallas TPU interpreter cannot run it
(the kernel stores through `ref.bitcast` views, which the interpreter cannot index), so CPU tensors run
upstream's own pure-JAX reference of the same op instead (`implementation="reference"`, which writes the cache
the same way): for checking values and serving code on a host without a TPU. The reference implements neither
context parallelism nor `attention_scope` other than "full" nor the seq-along-lane layout; those are refused
on CPU. Meta and fake tensors give shapes (`torch.compile(dynamic=True)` over the token count).
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["batched_rpa", "batched_rpa_op"]

_KV_LAYOUTS = ("head_along_sublane", "seq_along_lane")
_SCOPES = ("full", "cache_only", "new_tokens_only")

# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _batched_rpa_jax(queries: jax.Array, keys: jax.Array, values: jax.Array, kv_cache: jax.Array,
                     kv_lens: jax.Array, page_indices: jax.Array, cu_q_lens: jax.Array, distribution: jax.Array,
                     cp_rank: jax.Array | None, sm_scale: float, sliding_window: int | None, soft_cap: float | None,
                     mask_value: float | None, q_scale: float | None, k_scale: float | None, v_scale: float | None,
                     skip_kv_update: bool, kv_layout: str, decode_query_size: int, cp_group_size: int | None,
                     attention_scope: str) -> tuple[jax.Array, jax.Array]:
    return ops.batched_ragged_paged_attention(
        queries, keys, values, kv_cache, kv_lens, page_indices, cu_q_lens, distribution, sm_scale=sm_scale,
        sliding_window=sliding_window, soft_cap=soft_cap, mask_value=mask_value, q_scale=q_scale,
        k_scale=k_scale, v_scale=v_scale, skip_kv_update=skip_kv_update, kv_layout=kv_layout,
        decode_query_size=decode_query_size, cp_group_size=cp_group_size, cp_rank=cp_rank,
        attention_scope=attention_scope, implementation="mosaic_tpu")


@chip_for_tracing()
def _batched_rpa_reference_jax(queries: jax.Array, keys: jax.Array, values: jax.Array, kv_cache: jax.Array,
                               kv_lens: jax.Array, page_indices: jax.Array, cu_q_lens: jax.Array,
                               distribution: jax.Array, cp_rank: jax.Array | None, sm_scale: float,
                               sliding_window: int | None, soft_cap: float | None, mask_value: float | None,
                               q_scale: float | None, k_scale: float | None, v_scale: float | None,
                               skip_kv_update: bool, kv_layout: str, decode_query_size: int,
                               cp_group_size: int | None, attention_scope: str) -> tuple[jax.Array, jax.Array]:
    """What CPU tensors run: upstream's pure-JAX reference of the op (JAX's interpreter cannot run the kernel),
    on the 4-D cache it takes (a 5-D cache's split heads are merged and split back)."""
    del mask_value, decode_query_size  # the reference masks with -1e30 and takes any query length per sequence
    unsupported = {"cp_group_size": (cp_group_size, cp_group_size is not None),
                   "attention_scope": (attention_scope, attention_scope != "full"),
                   "kv_layout": (kv_layout, kv_layout != "head_along_sublane")}
    for name, (value, bad) in unsupported.items():
        if bad:
            raise NotImplementedError(f"tokamax batched_rpa: on CPU tensors upstream's pure-JAX reference runs, "
                                      f"which does not implement {name}={value!r}; lower it for TPU instead")
    cache = kv_cache.reshape(*kv_cache.shape[:2], -1, kv_cache.shape[-1])
    out, new_cache = ops.batched_ragged_paged_attention(
        queries, keys, values, cache, kv_lens, page_indices, cu_q_lens, distribution, sm_scale=sm_scale,
        sliding_window=sliding_window, soft_cap=soft_cap, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
        skip_kv_update=skip_kv_update, cp_rank=cp_rank, implementation="reference")
    return out, new_cache.reshape(kv_cache.shape)


# kv_cache (argument 3) is donated, as upstream's Torch op does: the kernel writes the new keys and values
# into the cache's own buffer instead of a copy of it.
batched_rpa_op = register("batched_rpa", _batched_rpa_jax, cpu_fn=_batched_rpa_reference_jax, donate_argnums=(3,))


# ---- Fake kernel that takes symbolic sizes ----------------------------------------------------
@batched_rpa_op.register_fake
def _batched_rpa_fake(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, kv_cache: torch.Tensor,
                      kv_lens: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                      distribution: torch.Tensor, cp_rank: torch.Tensor | None, sm_scale: float,
                      sliding_window: int | None, soft_cap: float | None, mask_value: float | None,
                      q_scale: float | None, k_scale: float | None, v_scale: float | None, skip_kv_update: bool,
                      kv_layout: str, decode_query_size: int, cp_group_size: int | None, attention_scope: str
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    # The output has queries' shape and dtype; the cache comes back with its own shape (4-D or 5-D, as given).
    return queries.new_empty(queries.shape), kv_cache.new_empty(kv_cache.shape)


# ---- What users call ---------------------------------------------------------------------------
def _check(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, kv_cache: torch.Tensor,
           index: dict[str, torch.Tensor], cp_rank: torch.Tensor | None, kv_layout: str) -> None:
    op = "batched_rpa"
    _checks.tensors(op, queries=queries, keys=keys, values=values, kv_cache=kv_cache, **index, cp_rank=cp_rank,
                    optional=("cp_rank",))
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not t.is_floating_point():
            raise TypeError(f"tokamax {op}: {name} must be a floating-point tensor, got {t.dtype}")
    if keys.dtype != values.dtype:
        raise TypeError(f"tokamax {op}: keys and values must share a dtype, got {keys.dtype}, {values.dtype}")
    _checks.rank(op, "queries", queries, (3,), "[tokens, num_q_heads, head_dim]")
    _checks.rank(op, "keys", keys, (3,), "[tokens, num_kv_heads, head_dim]")
    if keys.shape != values.shape:
        raise ValueError(f"tokamax {op}: values must have keys' shape {tuple(keys.shape)}, got {tuple(values.shape)}")
    _checks.same(op, "the token counts", queries=queries.shape[0], keys=keys.shape[0])
    _checks.same(op, "head_dim", queries=queries.shape[2], keys=keys.shape[2])
    if queries.shape[1] % keys.shape[1] != 0:
        raise ValueError(f"tokamax {op}: queries' {queries.shape[1]} heads must be a multiple of keys' "
                         f"{keys.shape[1]}")
    if kv_layout == "seq_along_lane":
        _checks.rank(op, "kv_cache", kv_cache, (5,), "[pages, 2 * num_kv_heads, head_dim / packing, packing, "
                     "page_size] for kv_layout='seq_along_lane'")
    else:
        _checks.rank(op, "kv_cache", kv_cache, (4, 5), "[pages, page_size, 2 * num_kv_heads, head_dim] (or with "
                     "the heads split as [2 * num_kv_heads / packing, packing])")
    _checks.paged_metadata(op, "kv_lens", *index.values())
    if cp_rank is not None:
        _checks.dtype(op, "cp_rank", cp_rank, (torch.int32,))
        _checks.shape(op, "cp_rank", cp_rank, (1,), "[1]")


def batched_rpa(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, kv_cache: torch.Tensor,
                kv_lens: torch.Tensor, page_indices: torch.Tensor, cu_q_lens: torch.Tensor,
                distribution: torch.Tensor, cp_rank: torch.Tensor | None = None, *, use_causal_mask: bool = True,
                sm_scale: float = 1.0, sliding_window: int | None = None, soft_cap: float | None = None,
                mask_value: float | None = None, q_scale: float | None = None, k_scale: float | None = None,
                v_scale: float | None = None, chunk_prefill_size: int | None = None, skip_kv_update: bool = False,
                kv_layout: str = "head_along_sublane", decode_query_size: int = 1, cp_group_size: int | None = None,
                attention_scope: str = "full") -> tuple[torch.Tensor, torch.Tensor]:
    """Batched ragged paged attention (upstream's public op, its Mosaic kernel): returns `(out, new_kv_cache)`.

    queries [tokens, num_q_heads, head_dim]; keys, values [tokens, num_kv_heads, head_dim] (the new tokens'
    projections; num_q_heads a multiple of num_kv_heads); kv_cache the paged cache, keys and values
    interleaved along the heads: [pages, page_size, 2 * num_kv_heads, head_dim] (or 5-D, as upstream's
    `get_kv_cache_shape`). int32 metadata: kv_lens [max_num_seqs] (each sequence's kv length including its
    new tokens), page_indices [max_num_seqs * pages_per_seq], cu_q_lens [max_num_seqs + 1] (cumulative query
    lengths), distribution [3] (cumulative counts of decode, prefill-only and mixed sequences); cp_rank int32
    [1] with `cp_group_size` for context parallelism.

    out has queries' shape and dtype; new_kv_cache has kv_cache's shape, with the new keys and values
    written in (unless `skip_kv_update`): use it in place of kv_cache, which is donated as in upstream's
    Torch op (on TPU the kernel updates its buffer; the kv_cache tensor passed in is invalid afterwards,
    so no copy of the cache is made per call). Upstream's kernel is causal
    only (`use_causal_mask` must be True) and takes no `chunk_prefill_size`. Not taken: upstream's
    `decode_block_sizes`, `prefill_block_sizes` and `vmem_limit_bytes` (upstream's config choice decides);
    `out_dtype` (upstream's kernel cannot write an output dtype other than queries': it fails reshaping the
    packed output); `return_lse` (upstream's Torch op does not support it); `debug_mode` (the kernel refuses
    it).
    """
    op = "batched_rpa"
    index = {"kv_lens": kv_lens, "page_indices": page_indices, "cu_q_lens": cu_q_lens, "distribution": distribution}
    _checks.choice(op, "kv_layout", kv_layout, _KV_LAYOUTS)
    _checks.choice(op, "attention_scope", attention_scope, _SCOPES)
    _check(queries, keys, values, kv_cache, index, cp_rank, kv_layout)
    if not use_causal_mask:
        raise ValueError(f"tokamax {op}: use_causal_mask must be True (upstream's kernel is causal only)")
    if chunk_prefill_size is not None:
        raise ValueError(f"tokamax {op}: chunk_prefill_size must be None (upstream's kernel does not take it), "
                         f"got {chunk_prefill_size}")
    _checks.positive(op, "decode_query_size", decode_query_size)
    if cp_group_size is not None:
        _checks.positive(op, "cp_group_size", cp_group_size)
    return batched_rpa_op(
        queries.contiguous(), keys.contiguous(), values.contiguous(), kv_cache.contiguous(),
        *(t.contiguous() for t in index.values()), None if cp_rank is None else cp_rank.contiguous(),
        float(sm_scale), sliding_window, *(None if x is None else float(x) for x in (soft_cap, mask_value, q_scale,
                                                                                   k_scale, v_scale)),
        skip_kv_update, kv_layout, decode_query_size, cp_group_size, attention_scope)
