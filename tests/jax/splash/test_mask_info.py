"""`splash.schedule` builds upstream's block schedule (`MaskInfo`) from the blocks' positions, without
upstream's O(q_len x kv_len) chunk loop: equal, field by field (dtype, shape, values), to what
upstream's `_process_mask` makes of the same lazy mask (causal, windows, full; offsets block-aligned
or not, negative; q_len below, equal to and above kv_len; forward and dK/dV, dynamic and static
grids; q and kv shards), and on the fields both have to what it makes of the same mask as a dense
`NumpyMask`; the mask function and upstream's sparsity alike. Where every block is full, upstream
returns no schedule but keeps `q_sequence` without a mask function (its kernel asserts against
that); here it is a full mask. Host work is bounded: counted in O(blocks) before anything is built,
built in O(entries) (tracemalloc peaks at 131072 and 1048576 tokens)."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

pytestmark = pytest.mark.kernels_ci

MASK_INFO = "_src.ops.experimental.tpu.splash_attention.splash_attention_mask_info"
MASK_LIB = "_src.ops.experimental.tpu.splash_attention.splash_attention_mask"
SHAPES = [(1024, 1024), (512, 1536), (1536, 512)]
BLOCKS = [(128, 128), (256, 128), (128, 512)]
MASKS = [("causal", None, None), ("local", 100, 0), ("local", 300, 40), ("local", 0, 0), ("local", None, 50)]
OFFSETS = [0, 300, 1024, -128, -200]
GRIDS = [(False, True), (False, False), (True, True), (True, False)]  # (is_dkv, dynamic)
SHARDS = [(1, 1), (2, 2), (4, 1), (1, 2)]


def _same(got, want, fields=None) -> str | None:
    for name in fields or want._fields:
        a, b = getattr(got, name), getattr(want, name)
        if (a is None) != (b is None):
            return f"{name}: {'None' if a is None else 'set'} here, {'None' if b is None else 'set'} upstream"
        if a is not None and (a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b)):
            return f"{name}: {a.dtype}{a.shape} here, {b.dtype}{b.shape} upstream"
    return None


def _dense(spec, shape: tuple[int, int], offset: int) -> np.ndarray:
    """The mask as a [q_len, kv_len] array: query i at position offset + i sees keys in [p - left, p + right]."""
    left, right = spec.bounds
    p, k = offset + np.arange(shape[0])[:, None], np.arange(shape[1])[None, :]
    allowed = np.ones(shape, bool)
    if left is not None:
        allowed &= k >= p - left
    if right is not None:
        allowed &= k <= p + right
    return allowed


def _grids(shape):  # noqa: ANN202
    for blocks, (is_dkv, dynamic), (qs, ks) in itertools.product(BLOCKS, GRIDS, SHARDS):
        if shape[0] % (qs * blocks[0]) == 0 and shape[1] % (ks * blocks[1]) == 0:
            yield blocks, is_dkv, dynamic, qs, ks


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mask", MASKS, ids=lambda m: m[0] if m[0] == "causal" else f"window{m[1:]}")
@pytest.mark.parametrize("offset", OFFSETS)
def test_equals_upstreams_mask_processing(kernel, get, mask, offset, shape):
    splash, info_lib, mask_lib = kernel.splash, get(MASK_INFO), get(MASK_LIB)
    spec = splash.MaskSpec(*mask)
    dense = mask_lib.NumpyMask(_dense(spec, shape, offset))
    rows, cols = np.arange(-3, shape[0] + 3)[:, None], np.arange(-3, shape[1] + 3)[None, :]
    checked = 0
    for blocks, is_dkv, dynamic, qs, ks in _grids(shape):
        where = f"{blocks} blocks, {'dkv' if is_dkv else 'fwd'} {'dynamic' if dynamic else 'static'}, shards {qs}x{ks}"
        kw = dict(q_seq_shards=qs, kv_seq_shards=ks, return_dynamic_grid=dynamic)
        info_lib._process_mask.cache_clear()
        want, want_fn = info_lib._process_mask(spec.lazy(shape, offset), blocks, is_dkv, **kw)
        schedule = splash.schedule.Schedule.of(spec, shape, offset, blocks, is_dkv=is_dkv, dynamic=dynamic,
                                               q_shards=qs, kv_shards=ks)
        got, got_fn = schedule.mask_info()
        if want.block_mask is None:  # every block full
            assert want.q_sequence is not None and want_fn is None, where  # upstream: what its kernel asserts on
            assert all(x is None for x in got) and got_fn is None, where
        else:
            assert (err := _same(got, want)) is None, f"{where}: {err}"
            assert np.array_equal(got_fn(rows, cols), want_fn(rows, cols)), f"{where}: mask function"
            assert schedule.entries == want.block_mask.size, where
            assert schedule.index_dtype == (None if want.active_rows is None else want.active_rows.dtype), where
            if want.block_mask.size:
                assert schedule.sparsity() == float(np.mean(want.block_mask != 0)), where
        if blocks != (128, 512) and qs * ks <= 4:  # and the dense mask's schedule, on the fields both have
            info_lib._process_mask.cache_clear()
            dense_info, _ = info_lib._process_mask(dense, blocks, is_dkv, **kw)
            common = ("active_rows", "active_cols", "block_mask", "num_active_blocks")
            assert (err := _same(got, dense_info, common)) is None, f"{where}, dense: {err}"
        checked += 1
    assert checked >= 12


@pytest.mark.parametrize(("mask", "offset", "shape"), [
    (("full", None, None), 0, (512, 768)),
    (("causal", None, None), 1023, (128, 1024)),  # one (padded) query row block at the end of the keys
    (("local", 2000, 2000), 100, (1024, 1024)),
])
def test_every_block_full_is_a_full_mask(kernel, get, mask, offset, shape):
    """No schedule and no mask function (the kernel then computes no mask); upstream's processing
    keeps `q_sequence` there without a mask function for a lazy mask, which its kernel asserts against."""
    splash, info_lib = kernel.splash, get(MASK_INFO)
    spec = splash.MaskSpec(*mask)
    for is_dkv, dynamic in GRIDS:
        schedule = splash.schedule.Schedule.of(spec, shape, offset, (128, 128), is_dkv=is_dkv, dynamic=dynamic)
        info, fn = schedule.mask_info()
        assert all(x is None for x in info) and fn is None
        assert schedule.all_full and schedule.entries == 0 and schedule.smem_bytes(False) == 0
        assert schedule.smem_bytes(True) == 17 * (shape[0] // 128) * (shape[1] // 128)  # refined over every block
        info_lib._process_mask.cache_clear()
        want, want_fn = info_lib._process_mask(spec.lazy(shape, offset), (128, 128), is_dkv,
                                               return_dynamic_grid=dynamic)
        assert want_fn is None and want.block_mask is None
        assert (want.q_sequence is None) == (spec.kind == "full")


def test_fresh_arrays_every_call(kernel):
    """Two schedules of one call share no array (JAX folds trace constants by identity)."""
    splash = kernel.splash
    make = lambda: splash.schedule.Schedule.of(splash.MaskSpec("causal"), (1024, 1024), 0, (128, 128),  # noqa: E731
                                               is_dkv=False).mask_info()[0]
    a, b = make(), make()
    assert all(x is not y and not np.shares_memory(x, y) for x, y in zip(a, b, strict=True) if x is not None)


def test_smem_bytes_per_entry(kernel):
    """2 x index bytes + 1 (block mask) + 8 (row bounds) per entry; static grids 1 byte per block, 17
    with segment ids (refined with int32 indices over every block)."""
    schedule, spec = kernel.splash.schedule.Schedule, kernel.splash.MaskSpec("causal")
    small = schedule.of(spec, (131072, 131072), 0, (1024, 1024), is_dkv=False)
    assert (small.entries, small.index_dtype.name) == (128 * 129 // 2, "int8")
    assert small.smem_bytes(False) == small.smem_bytes(True) == 8256 * 11
    large = schedule.of(spec, (1 << 20, 1 << 20), 0, (1024, 1024), is_dkv=True)
    assert (large.entries, large.index_dtype.name) == (1024 * 1025 // 2, "int16")
    assert large.smem_bytes(False) == 524800 * 13 == 6822400
    static = schedule.of(spec, (2048, 2048), 0, (1024, 1024), is_dkv=True, dynamic=False)
    assert static.index_dtype is None and static.smem_bytes(False) == 4 and static.smem_bytes(True) == 4 * 17


@pytest.mark.parametrize("length", [131072, 1 << 20])
def test_host_memory_is_linear_in_blocks(kernel, emulation, length):
    """Counting a causal schedule at 1024-token blocks and a 4096-token window's at 1024 and 128-token
    blocks takes O(blocks); building the window's O(entries) plus q_sequence (4 bytes a token). Peaks
    far below even one nq x nkv grid at 128-token blocks (8 bytes a pair: 512 MiB at 1M tokens)."""
    splash = kernel.splash
    causal, window = splash.MaskSpec("causal"), splash.MaskSpec("local", 4095, 0)
    tracemalloc.start()
    try:
        for spec, blocks in ((causal, (1024, 1024)), (causal, (128, 128)), (window, (128, 128))):
            for is_dkv in (False, True):
                schedule = splash.schedule.Schedule.of(spec, (length, length), 0, blocks, is_dkv=is_dkv)
                assert schedule.smem_bytes(True) > 0
        _, counting = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for is_dkv in (False, True):
            schedule = splash.schedule.Schedule.of(window, (length, length), 0, (1024, 1024), is_dkv=is_dkv)
            assert schedule.mask_info()[0].block_mask.size == schedule.entries <= 5 * length // 1024
        _, building = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counting < 2 << 20, f"counting took {counting:,} B"
    assert building < 4 * length + (2 << 20), f"building took {building:,} B"
