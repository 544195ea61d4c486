"""Sparse MLA (DeepSeek-V4 CSA gather + attention): a small mixed decode/prefill batch.

TPU7x only: the top-k gather runs on SparseCore (`csa_gather`), and upstream's op and tests
(`supported_on`: generation >= 7 with a SparseCore; "Only tested on TPU7x") exclude v5e/v6e.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.sparse_mla.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.sparse_mla.reference"

NOPE_DIM, ROPE_DIM, PERIOD = 448, 64, 64  # DSV4 record: 448 e4m3 + 64 lane-periodic e8m0 scales; 64 bf16 rope
HEAD_DIM = NOPE_DIM + ROPE_DIM
SM_SCALE = HEAD_DIM**-0.5


def _nope_words(x: np.ndarray) -> np.ndarray:
    """f32 [pages, page, 448] -> the int32 [pages, page, 128] NoPE cache (csa_cache_layout)."""
    blocked = x.reshape(*x.shape[:-1], NOPE_DIM // PERIOD, PERIOD)
    amax = np.maximum(np.abs(blocked).max(axis=-2, keepdims=True), 1e-4)
    exp = np.ceil(np.log2(amax / 448.0))  # e8m0 scale 2**exp, so |x / scale| <= 448 (e4m3 max)
    q = (blocked / np.exp2(exp)).astype(jnp.float8_e4m3fn).view(np.uint8).reshape(x.shape)
    scales = (exp[..., 0, :] + 127).astype(np.uint8)  # [pages, page, 64]
    slab = np.concatenate([q, scales], axis=-1).reshape(*x.shape[:-1], 4, 128)  # byte b*128 + w
    return np.ascontiguousarray(np.swapaxes(slab, -1, -2)).view("<i4")[..., 0]  # word w = bytes (0..3, w)


def _rope_words(x: np.ndarray) -> np.ndarray:
    """f32 [pages, page, 64] -> the int32 [pages, page // 4, 128] RoPE cache: word k = bf16 k | bf16 k+32."""
    bits = x.astype(jnp.bfloat16).view(np.uint16).astype(np.uint32)
    words = (bits[..., :32] | (bits[..., 32:] << 16)).view(np.int32)
    return words.reshape(x.shape[0], -1, 128)


def _inputs(q_lens: list[int], topk: int, num_heads: int, page_size: int, pages_per_seq: int,
            seed: int) -> tuple[np.ndarray, ...]:
    r = rng(seed)
    num_seqs = len(q_lens)
    num_tokens = sum(q_lens)
    cu_q_lens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    kv_lens = r.integers(topk // 2, pages_per_seq * page_size, num_seqs)  # some rows shorter than topk
    topk_rows = np.full((num_tokens, topk), -1, np.int32)  # selected positions first, -1 padding last
    for s in range(num_seqs):
        for t in range(cu_q_lens[s], cu_q_lens[s + 1]):
            sel = r.permutation(kv_lens[s])[:topk]
            topk_rows[t, : sel.size] = sel
    total_pages = num_seqs * pages_per_seq + 3  # a few pages no sequence owns
    page_indices = r.permutation(total_pages)[: num_seqs * pages_per_seq].astype(np.int32)
    kv = r.standard_normal((total_pages, page_size, HEAD_DIM), np.float32)
    num_decode = sum(1 for n in q_lens if n == 1)
    distribution = np.array([num_decode, num_decode, num_seqs], np.int32)
    swa_l = r.uniform(0.5, 4.0, (num_tokens, num_heads)).astype(np.float32)
    return (
        r.standard_normal((num_tokens, num_heads, HEAD_DIM), np.float32).astype(jnp.bfloat16),  # q
        _nope_words(kv[..., :NOPE_DIM]),
        _rope_words(kv[..., NOPE_DIM:]),
        topk_rows,
        page_indices,
        cu_q_lens,
        distribution,
        r.standard_normal(num_heads).astype(np.float32),  # attention_sinks
        (r.standard_normal((num_tokens, num_heads, HEAD_DIM), np.float32)
         * swa_l[..., None]).astype(jnp.bfloat16),  # swa_accumution (unnormalized numerator)
        swa_l,
        r.standard_normal((num_tokens, num_heads)).astype(np.float32),  # swa_m
    )


def _kernel(get, **kw):  # noqa: ANN001, ANN202
    return functools.partial(get(KERNEL).sparse_ragged_paged_attention, sm_scale=SM_SCALE, **kw)


def _reference(get):  # noqa: ANN001, ANN202
    return functools.partial(get(REFERENCE).sparse_ragged_paged_attention, sm_scale=SM_SCALE)


# Both the gather and the attention kernel need DMA features JAX's Pallas TPU interpreter lacks
# (tried with interpret_chip v7x and v6e, and with csa_gather swapped for a pure-JAX gather).
_XFAIL = ("jax's Pallas TPU interpreter resolves DMA refs only through integer/slice indexers: csa_gather's "
          "SparseCore `pl.Indirect` gather DMA carries a vector of row ids, so interpret `dma_start` fails "
          "(`jax.tree.map(int, src_transforms)`: TypeError: Only scalar arrays can be converted to Python scalars; "
          "got arr.ndim=1), and the attention kernel DMAs from `cache_ref.bitcast(...)` views "
          "(interpret/utils.py to_range: AttributeError: 'BitcastTransform' object has no attribute 'indices')")

CASES = [
    Case(
        id="sparse_mla/mixed-s4-t16-topk128-h8-p16-chunk8-b4",
        # 2 decode + 2 prefill sequences; two gather+attention chunks of 8 tokens, 2 grid steps of 4 each.
        call=lambda get: _kernel(get, gather_and_attention_chunk_size=8, attention_kernel_batch_size=4),
        inputs=lambda: _inputs([1, 1, 5, 9], topk=128, num_heads=8, page_size=16, pages_per_seq=16, seed=0),
        reference=_reference,
        tolerance=(2e-2, 2e-2),
        tolerance_why="bf16 q, SWA numerator and output (|out| < 1); both sides dequantize the same fp8/bf16 KV "
        "bytes to the same bf16 values and accumulate QK and PV in f32, so only the output's bf16 rounding, the "
        "kernel's approximate reciprocal of l and summation order differ (upstream's test allows 0.1)",
        chips=("v7x",),
        interpret_chip="v7x",
        interpret_xfail=_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "Only scalar arrays can be converted to Python scalars"),
    ),
]
