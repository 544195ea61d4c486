"""Lightning indexer (`streamindex_topk`): scores an FP8 paged key cache per query token and keeps the top k.

A TensorCore kernel scores every cached key (ReLU of q.k per head, weighted, times the key's UE8M0 scale), then
upstream's SparseCore top-k selects the winners. Upstream's Op runs on TPU generation 7 and later only
(`supported_on`), and the SparseCore top-k is written for v7x's 16 SparseCore lanes: v7x only. JAX's interpreter
cannot run the SparseCore stage (as for the topk kernel); numerics would be checked against upstream's pure-JAX
reference (dequantize, score, `lax.top_k`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng
from .topk import SPARSECORE_XFAIL

KERNEL = "_src.ops.lightning_indexer.kernel.streamindex_topk"
REFERENCE = "_src.ops.lightning_indexer.reference"
TOKENS, HEADS, D, PAGES, PAGE, TOPK = 16, 8, 128, 8, 64, 32
BLOCKS = {"num_kv_pages_per_block": 2, "num_queries_per_block": 8}  # 2 pages of 64 tokens: 128-token kv blocks


def _inputs() -> tuple[np.ndarray, ...]:
    """Sequence 0 decodes 1 token at kv length 100; sequence 1 is mixed, 8 new tokens at kv length 200.

    The cache holds each token's record: 128 FP8 (e4m3) key bytes, then its UE8M0 scale byte (2^-2..2^2).
    """
    r = rng(TOKENS + HEADS + D)
    q = r.standard_normal((TOKENS, HEADS, D), np.float32).astype(jnp.bfloat16)
    weights = r.standard_normal((TOKENS, HEADS), np.float32).astype(jnp.bfloat16)
    keys = r.standard_normal((PAGES, PAGE, D), np.float32).astype(jnp.float8_e4m3fn).view(np.uint8)
    record = np.zeros((PAGES, PAGE, 2 * D), np.uint8)  # record width: align_to(D + D // 128, 128)
    record[:, :, :D] = keys
    record[:, :, D] = r.integers(125, 130, size=(PAGES, PAGE))
    cache_kv = record.reshape(PAGES, PAGE // 4, 4, 2 * D)  # HEAD_ALONG_SUBLANE, 4 tokens per packed row
    seq_lens = np.array([100, 200], np.int32)
    page_indices = np.array([3, 5, 0, 0, 1, 6, 2, 7], np.int32)  # 4 pages per sequence
    cu_q_lens = np.array([0, 1, 9], np.int32)
    distribution = np.array([1, 1, 2], np.int32)  # cumulative: 1 decode, 0 prefill-only, 1 mixed
    return q, weights, cache_kv, seq_lens, page_indices, cu_q_lens, distribution


def _compare(out, expected) -> None:  # noqa: ANN001
    """Winners may come in any order and ties may pick either key: compare each row's selected scores."""
    idx, bits = (np.asarray(a) for a in out)
    ref_idx, ref_bits = (np.asarray(a) for a in expected)
    assert idx.shape == ref_idx.shape, (idx.shape, ref_idx.shape)
    got = np.asarray(jax.lax.bitcast_convert_type(jnp.asarray(bits), jnp.float32))
    want = np.asarray(jax.lax.bitcast_convert_type(jnp.asarray(ref_bits), jnp.float32))
    for i in range(idx.shape[0]):
        assert np.count_nonzero(idx[i] >= 0) == np.count_nonzero(ref_idx[i] >= 0), f"row {i}: winners"
        np.testing.assert_allclose(np.sort(got[i][idx[i] >= 0]), np.sort(want[i][ref_idx[i] >= 0]),
                                   rtol=1e-5, atol=1e-5, err_msg=f"row {i}")


def _case(compression_ratio: int) -> Case:
    kw = {"k": TOPK, "compression_ratio": compression_ratio, "return_scores": True}
    return Case(
        id=f"lightning_indexer/decode_and_mixed-h{HEADS}-d{D}-page{PAGE}-k{TOPK}-c{compression_ratio}",
        call=lambda get: functools.partial(get(KERNEL).streamindex_topk, **kw, **BLOCKS),
        inputs=_inputs,
        reference=lambda get: functools.partial(get(REFERENCE).lightning_indexer, **kw),
        compare=_compare,
        tolerance=(1e-5, 1e-5),
        tolerance_why="f32 scores from exact FP8 x bf16 products summed over 128 dims and 8 heads: order only",
        chips=("v7x",),
        interpret_chip="v7x",
        interpret_xfail=SPARSECORE_XFAIL,
        interpret_raises=(AttributeError, "'Fake' object has no attribute 'arg_names'"),
    )


CASES = [_case(1), _case(4)]
