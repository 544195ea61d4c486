"""DeepSeek-V4 compress-and-store (`compress_norm_rope_store`): CSA and HCA, in-place cache updates.

TPU7x only: upstream's op (`supported_on`: generation >= 7) and tests ("Only tested on TPU7x and
newer"; a large CSA decode batch fails on v6e) exclude v5e/v6e.

The f32 compressor state is written straight into the caches in numpy (what upstream's tests get
from the `proj_and_save_state` reference): one token's state is `rows` cache rows of 128 f32
lanes, the 4 bytes of lane `l` in sub-rows 0..3 (so, in CSA's int32 cache, word `l` is the f32).
"""

from __future__ import annotations

import jax
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.dsv4_compressor.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.dsv4_compressor.reference"

HEAD_DIM, ROPE_DIM = 512, 64


def _state_f32(r: np.random.Generator, pages: int, page_rows: int) -> np.ndarray:
    """Random f32 state pages as `[pages, page_rows, 128]` words: kv and score fields ~ N(0, 1)."""
    return r.standard_normal((pages, page_rows, 128), np.float32)


def _f32_to_slabs(x: np.ndarray) -> np.ndarray:
    """f32 `[..., 128]` -> uint8 `[..., 4, 128]`: byte b of lane l in sub-row b."""
    return np.ascontiguousarray(np.swapaxes(x.view(np.uint8).reshape(*x.shape, 4), -1, -2))


def _tokens(r: np.random.Generator, tiles: list[list[tuple[int, int, int]]], tile_n: int):  # noqa: ANN202
    """Tiles of (request, position, kv_slot), each padded with upstream's slot-less filler and shuffled."""
    tokens = []
    for tile in tiles:
        tile = tile + [(0, 0, -1)] * (tile_n - len(tile))
        tokens += [tile[i] for i in r.permutation(tile_n)]
    return (np.array(x, np.int32) for x in zip(*tokens, strict=True))


def _csa_inputs(seed: int) -> tuple[np.ndarray, ...]:
    """CSA: 2 requests x 24 tokens of state, 6 boundary tokens in 2 tiles of 4.

    Cache `int32[13, 64, 128]`: a 64-row page hosts 4 token states (16 rows each), so the state is
    paged at 4 tokens (`state_block_size`); pages 0..11 hold the states, page 12 the records.
    """
    r = rng(seed)
    page_rows, state_block, compress_ratio = 64, 4, 4
    num_reqs, run_tokens, tile_n = 2, 24, 4
    pages_per_req = run_tokens // state_block
    num_pages = num_reqs * pages_per_req + 1
    stride = pages_per_req + 1  # one unused block table column per request
    block_table = r.integers(0, num_pages, (num_reqs, stride)).astype(np.int32)
    block_table[:, :pages_per_req] = r.permutation(num_reqs * pages_per_req).reshape(num_reqs, pages_per_req)
    cache = _state_f32(r, num_pages, page_rows).view(np.int32)
    cache[-1] = r.integers(-(2**31), 2**31, (page_rows, 128), dtype=np.int32)  # bytes the kernel must keep
    first_slot = (num_pages - 1) * page_rows
    slots = first_slot + r.permutation(4)  # 4 records sharing one RoPE row stay in one tile
    tile0 = [(0, (w + 1) * compress_ratio - 1, int(s)) for w, s in zip([0, 2, 3, 5], slots, strict=True)]
    tile1 = [(1, 7, first_slot + 5), (1, 19, first_slot + 4), (1, 9, -1)]  # + a non-boundary token
    reqs, positions, kv_slots = _tokens(r, [tile0, tile1], tile_n)
    return (
        cache,
        positions,
        block_table.reshape(-1),
        reqs,
        kv_slots,
        r.standard_normal(HEAD_DIM).astype(np.float32),  # rms_weight
        r.standard_normal((int(positions.max()) + 1, ROPE_DIM)).astype(np.float32),  # cos_sin_cache
        r.integers(-(2**31), 2**31, (num_pages, page_rows // 4, 128), dtype=np.int32),  # rope_cache
    )


def _hca_inputs(seed: int) -> tuple[np.ndarray, ...]:
    """HCA: 1 request x 384 tokens of state, 3 boundary tokens (compress ratio 128) in one tile.

    State `uint8[13, 256, 4, 128]`: 32 token states (8 rows each) per page, pages 0..11 used.
    Cache `uint8[13, 16, 4, 128]`: 8 bf16 records of 2 rows per page; the records land on page 12.
    """
    r = rng(seed)
    state_rows, state_block, compress_ratio, run_tokens, tile_n = 256, 32, 128, 384, 4
    num_state_pages = run_tokens // state_block
    num_pages = num_state_pages + 1
    block_table = r.permutation(num_state_pages).astype(np.int32)
    block_table = np.concatenate([block_table, np.arange(num_state_pages, num_pages, dtype=np.int32)])
    state = _f32_to_slabs(_state_f32(r, num_pages, state_rows))
    cache = r.integers(0, 256, (num_pages, 16, 4, 128), dtype=np.uint8)  # bytes the kernel must keep
    first_slot = num_state_pages * 16
    tile = [(0, (w + 1) * compress_ratio - 1, first_slot + 2 * i) for i, w in enumerate([2, 0, 1])]
    reqs, positions, kv_slots = _tokens(r, [tile], tile_n)
    return (
        cache,
        positions,
        block_table,
        reqs,
        kv_slots,
        r.standard_normal(HEAD_DIM).astype(np.float32),  # rms_weight
        r.standard_normal((int(positions.max()) + 1, ROPE_DIM)).astype(np.float32),  # cos_sin_cache
        state,
    )


_CSA = dict(block_table_stride=7, state_block_size=4, compress_ratio=4, overlap=True, quant_block=64)
_HCA = dict(block_table_stride=13, state_block_size=32, compress_ratio=128, overlap=False)


def _csa(fn):  # noqa: ANN001, ANN202
    return lambda cache, pos, bt, reqs, slots, w, cos_sin, rope: fn(
        cache, pos, bt, reqs, slots, w, cos_sin_cache=cos_sin, rope_cache=rope, **_CSA)


def _hca(fn):  # noqa: ANN001, ANN202
    return lambda cache, pos, bt, reqs, slots, w, cos_sin, state: fn(
        cache, pos, bt, reqs, slots, w, cos_sin_cache=cos_sin, state_cache=state, **_HCA)


def _zero_sign_fp8(b: np.ndarray) -> np.ndarray:
    return np.where((b & 0x7F) == 0, 0, b)


def _zero_sign_bf16(bits: np.ndarray) -> np.ndarray:
    return np.where((bits & 0x7FFF) == 0, 0, bits)


def _compare_csa(out, expected) -> None:  # noqa: ANN001
    """Bit-exact caches, up to the sign of fp8 / bf16 zeros (upstream's check)."""
    (cache, rope), (cache_ref, rope_ref) = out, expected
    np.testing.assert_array_equal(_zero_sign_fp8(np.asarray(cache).view(np.uint8)),
                                  _zero_sign_fp8(np.asarray(cache_ref).view(np.uint8)))
    np.testing.assert_array_equal(_zero_sign_bf16(np.asarray(rope).view(np.uint16)),
                                  _zero_sign_bf16(np.asarray(rope_ref).view(np.uint16)))


def _compare_hca(out, expected) -> None:  # noqa: ANN001
    """Every bf16 of the cache within 1 ulp (upstream's kernel test); bytes the kernel keeps match exactly."""
    (cache, rope), (cache_ref, _) = out, expected
    assert rope is None, "no RoPE cache outside CSA"

    def line(c):  # noqa: ANN001, ANN202 - bf16 bits (low byte in sub-row 2k, high in 2k+1) -> monotonic ints
        b = np.asarray(c).astype(np.int32).reshape(*c.shape[:-2], 2, 2, c.shape[-1])
        bits = b[..., 0, :] | (b[..., 1, :] << 8)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits & 0x7FFF)

    np.testing.assert_array_less(np.abs(line(cache) - line(cache_ref)), 2, err_msg="bf16 ulps from reference")


# Every mode views refs through `.bitcast(jnp.uint8)` (tried with interpret_chip v7x and v6e): CSA's
# int32 caches are DMA'd as uint8 slabs (`csa_cache_layout.as_u8_slabs`), and all modes store into
# the bitcast f32 window scratch (`window_vmem.bitcast(jnp.uint8)`).
_XFAIL = ("jax's Pallas TPU interpreter resolves refs only through integer/slice indexers, and the kernel "
          "DMAs from and stores into `ref.bitcast(jnp.uint8)` views (interpret/utils.py to_range: "
          "AttributeError: 'BitcastTransform' object has no attribute 'indices')")

CASES = [
    Case(
        id="dsv4_compressor/csa-t8-tile4-p64",
        call=lambda get: _csa(get(KERNEL).compress_norm_rope_store),
        inputs=lambda: _csa_inputs(0),
        reference=lambda get: _csa(get(REFERENCE).compress_norm_rope_store),
        compare=_compare_csa,
        tolerance_why="the kernel writes fp8 records, e8m0 scales and bf16 RoPE words into int32 caches in place: "
        "compared byte for byte (zero signs normalized), as upstream does; f32 pooling and norm round identically",
        chips=("v7x",),
        interpret_chip="v7x",
        interpret_xfail=_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "'BitcastTransform' object has no attribute 'indices'"),
    ),
    Case(
        id="dsv4_compressor/hca-t4-tile4-p16-state256",
        call=lambda get: _hca(get(KERNEL).compress_norm_rope_store),
        inputs=lambda: _hca_inputs(0),
        reference=lambda get: _hca(get(REFERENCE).compress_norm_rope_store),
        compare=_compare_hca,
        tolerance_why="bf16 records of a 128-token f32 softmax pool: kernel and reference sum the window in "
        "different orders, so a value may land 1 bf16 ulp apart (upstream's kernel test allows 1 ulp)",
        chips=("v7x",),
        interpret_chip="v7x",
        interpret_xfail=_XFAIL,
        interpret_raises=(jax.errors.JaxRuntimeError, "'BitcastTransform' object has no attribute 'indices'"),
    ),
]
