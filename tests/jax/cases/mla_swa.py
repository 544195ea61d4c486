"""MLA sliding-window ragged paged attention (`mla_sliding_window_ragged_paged_attention`) against upstream's reference.

The SWA cache is the uint8 slab layout DeepSeek V4 overlays on the CSA cache: [pages, 2 * physical page tokens, 4, 128],
each bf16 token of head_dim 512 taking two (4, 128) slots, its bytes interleaved lo/hi per 128-lane block.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.experimental.mla_swa.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.experimental.mla_swa.reference"

HEAD_DIM = 512  # upstream's only head dim: one token = 1024 bytes = two (4, 128) uint8 slots
NUM_HEADS = 8
PAGE_SIZE = 16  # logical page; the physical page holds 4 more tokens, as upstream's tests
PHYS_PAGE = PAGE_SIZE + 4
PAGES_PER_SEQ = 8
SM_SCALE = HEAD_DIM**-0.5


def _encode(tokens: np.ndarray) -> np.ndarray:
    """bf16 [n, HEAD_DIM] -> uint8 [n, 2 * HEAD_DIM]: per 128-lane block, the 128 low bytes then the 128 high bytes."""
    u16 = tokens.view(np.uint16).reshape(len(tokens), HEAD_DIM // 128, 1, 128)
    return np.concatenate([u16 & 0xFF, u16 >> 8], axis=2).astype(np.uint8).reshape(len(tokens), 2 * HEAD_DIM)


def _inputs(seed: int, q_lens: list[int], ctx_lens: list[int], num_decode: int,
            int32_cache: bool = False) -> tuple[np.ndarray, ...]:
    """With `int32_cache`, the cache is the CSA host's int32 [pages, rows, 128] words: byte b of a word is sub-row b."""
    r = rng(seed)
    bf16 = jnp.bfloat16
    batch, tokens = len(q_lens), sum(q_lens)
    num_pages = batch * PAGES_PER_SEQ + 2  # two pages no sequence uses
    old_tokens = r.standard_normal((num_pages * PHYS_PAGE, HEAD_DIM), np.float32).astype(bf16)
    cache = _encode(old_tokens).reshape(num_pages, 2 * PHYS_PAGE, 4, 128)
    if int32_cache:
        cache = np.ascontiguousarray(np.swapaxes(cache, -1, -2)).view("<i4")[..., 0]
    return (
        r.standard_normal((tokens, NUM_HEADS, HEAD_DIM), np.float32).astype(bf16),  # q
        r.standard_normal((tokens, HEAD_DIM), np.float32).astype(bf16),  # new_kv
        cache,  # cache_kv
        np.array(ctx_lens, np.int32) + np.array(q_lens, np.int32),  # kv_lens (include the new tokens)
        r.permutation(num_pages)[: batch * PAGES_PER_SEQ].astype(np.int32),  # page_indices
        np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32),  # cu_q_lens
        np.array([num_decode, num_decode, batch], np.int32),  # distribution: decode-only, prefill-only, mixed ends
        r.random((NUM_HEADS,), np.float32),  # attention_sinks
    )


def _call(get, **kw):  # noqa: ANN001, ANN202
    return functools.partial(get(KERNEL).mla_sliding_window_ragged_paged_attention, sm_scale=SM_SCALE,
                             logical_page_size=PAGE_SIZE, q_compute_block_size=4, **kw)


def _reference(get, sliding_window: int):  # noqa: ANN001, ANN202
    return functools.partial(get(REFERENCE).mla_sliding_window_ragged_paged_attention, sm_scale=SM_SCALE,
                             logical_page_size=PAGE_SIZE, sliding_window=sliding_window)


def _compare(out, expected) -> None:  # noqa: ANN001
    """Output and (l, m) within tolerance; the updated cache (a byte scatter of the new KV) exactly."""
    (o, cache, lsum, m), (e, e_cache, e_lsum, e_m) = out, expected
    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(e, np.float32), rtol=3e-2, atol=3e-2)
    np.testing.assert_allclose(np.asarray(lsum), np.asarray(e_lsum), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(np.asarray(m), np.asarray(e_m), rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(cache), np.asarray(e_cache))


_WHY = ("bf16 q and KV, f32 logits and softmax on both sides, outputs rounded to bf16 (|out| < ~3, ulp <= 1.6e-2); "
        "the kernel's online softmax rescales in a different order, so out gets ~2 ulp, l (a sum of <= window exps, "
        "< ~10) 2e-2, m (one f32 dot) 1e-3. The cache only moves bytes: exact.")

# JAX's TPU interpreter resolves a ref's transforms to index ranges assuming only NDIndexers (interpret/utils.py
# to_range); both kernels view refs through `.bitcast(...)` (the batched-decode KV buffer, an int32 cache as uint8
# slabs) and `.reshape(...)` (the HBM cache as token rows; the first failure with a uint8 cache and the flash
# kernel), so no shape avoids it.
def _xfail(transform: str) -> str:
    return (f"Pallas TPU interpret mode cannot access a ref through a {transform}: interpret/utils.py to_range: "
            f"AttributeError: '{transform}' object has no attribute 'indices'")


# Upstream supports MLA-SWA on TPU7x only (`supported_on`: generation >= 7; its tests skip unless device is TPU7x).
# What every case below shares.
_case = functools.partial(
    Case,
    compare=_compare,
    tolerance=(3e-2, 3e-2),
    tolerance_why=_WHY,
    chips=("v7x",),
    interpret_chip="v7x",
    interpret_xfail=_xfail("BitcastTransform"),
    interpret_raises=(jax.errors.JaxRuntimeError, "'BitcastTransform' object has no attribute 'indices'"),
)

CASES = [
    _case(
        id="mla_swa/mixed-2decode-2prefill-w16-h8",
        # bkv = 2 pages = 32 tokens >= window: decode goes to the batched-decode kernel, the rest to the mixed kernel.
        call=lambda get: _call(get, sliding_window=16, num_kv_pages_per_block=2, num_queries_per_block=(1, 8, 8)),
        inputs=lambda: _inputs(0, q_lens=[1, 1, 7, 12], ctx_lens=[20, 5, 30, 9], num_decode=2),
        reference=lambda get: _reference(get, 16),
    ),
    _case(
        id="mla_swa/decode-w32-bkv16-h8-int32cache",
        # bkv = 1 page = 16 tokens < window 32: decode goes to the flash (DECODE) kernel, over several kv blocks.
        call=lambda get: _call(get, sliding_window=32, num_kv_pages_per_block=1, num_queries_per_block=1),
        inputs=lambda: _inputs(1, q_lens=[1, 1, 1], ctx_lens=[39, 6, 100], num_decode=3, int32_cache=True),
        reference=lambda get: _reference(get, 32),
    ),
]
