"""The block schedule of a splash call at an offset fixed when tracing (upstream's `MaskInfo`), built
from the blocks' positions, and the SMEM it takes, bounded before anything is built.

Upstream's `_process_mask` (splash_attention_mask_info.py) builds the schedule of a lazy causal or
local mask by materialising every (q block, kv block) chunk of the mask with numpy, testing it
(`any`, `all`) and hashing it: O(q_len x kv_len) host work for a mask the kernel then computes
itself (21.7 s to lower one causal call at 131072 tokens; its forward and VJP Ops process the mask
three times). Here the same arrays come from positions alone. Query i sits at KV position offset + i,
so a q block spans positions [i*bq + offset, i*bq + bq - 1 + offset] and a kv block [j*bkv, j*bkv +
bkv - 1]; for causal and local masks (keys in [p - left, p + right]) the kv blocks a q block reaches
are one contiguous run, and so are those it sees whole (and, transposed, the q blocks a kv block is
seen by). Per schedule row that is two half-open ranges of blocks (found with `searchsorted`), and
the entries follow with `np.repeat`: O(blocks + entries) host time and memory, nothing of size
q_len x kv_len or nq x nkv (but the static grid, which is that by definition and only used at 3
or fewer KV blocks).

`Schedule.of(...).mask_info()` is bit-identical to `_process_mask(spec.lazy(shape, offset), ...)`
for the same blocks, shards and grid (dtype, shape and values of every field; the tests compare
them), as upstream's kernel construction asks for it: forward (dynamic grid), dKV (dynamic when the
VJP reduces dq in 3 steps, else static), q and kv shards; the entries in row-major order of each
shard's grid (transposed for dKV), a dKV row that sees no block scheduled once at column 0 with
block mask 0 (so its tile is written), shards padded with -1 to the longest and concatenated, the
indices in the smallest integer type holding them, `q_sequence` the query indices. One deliberate
difference: where every block is full, upstream returns no schedule but keeps `q_sequence` without
a mask function, which its kernel asserts against; here that is a full mask (no schedule, no mask
function), which is what it is.

Every call builds fresh arrays: none is cached or shared between calls or between the forward and
backward kernels. (Upstream's `_process_mask` is an `lru_cache`; a hit hands out the arrays of an
earlier call, and JAX folds a traced function's constants by object identity, so how many constants a
module held depended on what was lowered before it.)

SMEM: the kernel keeps each entry's row and column (int8, int16 or int32), its block mask (int8) and
the start and end flags of its row (int32 each, `find_bounds`) in scalar memory, 2 x index bytes + 9
per entry; with segment ids a static grid (or none: a full mask) is refined over all nq x nkv blocks
with int32 indices, 17 bytes per block; a static grid without ids keeps its block mask alone, 1 byte
per block. `Schedule.check_smem` compares that, counted in O(rows) before any array exists, with the
chip's SMEM (`pltpu.get_tpu_info().smem_capacity_bytes`) less `SMEM_RESERVE`, and refuses calls that
do not fit, naming the ways out.

Why not patch upstream's mask processing for our calls: a substitution of `process_mask` in
upstream's module, even scoped, is global state (every thread tracing upstream's public ops inside the
scope would see it); building upstream's `SplashAttentionKernel` from this schedule, as upstream's
own `make_splash_mha` and its Ops do, touches nothing of upstream's (`fixed_offset` does that), and
upstream's public ops keep running upstream's code unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _upstream
from .masks import MaskSpec

SMEM_RESERVE = 64 * 1024
"""Bytes of a core's SMEM left for what else the kernel keeps there: its sinks and max-logit blocks
((8, heads) float32 each), grid indices and Mosaic's own scalars. A margin: libtpu's SMEM report for
the forward kernel shows the schedule operands padded to 512 bytes each and about 1.2 KiB besides
(docs/jax.md, `tools/tpu_compile/cases/splash.py`)."""

_BOUNDS_BYTES = 8  # find_bounds: bounds_start and bounds_end, int32 per entry
REFINED_BYTES = 4 + 4 + 1 + _BOUNDS_BYTES
"""SMEM per block of a grid without indices (static, or none) that segment ids refine: every (q block,
kv block) pair gets int32 indices, an int8 block mask and its bounds."""


def refined_grid_bytes(blocks: int) -> int:
    """SMEM of a `blocks`-pair grid refined by segment ids."""
    return blocks * REFINED_BYTES


def _index_dtype(largest: int) -> np.dtype:
    """The type upstream's `_downcast_to_small_type` picks for indices up to `largest`."""
    for dtype in (np.int8, np.int16):
        if largest <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def _downcast(array: np.ndarray) -> np.ndarray:
    """int32 `array` in the smallest type holding its values, as upstream downcasts (kept if empty)."""
    return array if array.size == 0 else array.astype(_index_dtype(int(array.max())))


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """The schedule of one kernel call, as per-row ranges: for each schedule row (a q block forward, a
    kv block for dKV; global indices) the column blocks it reaches, [lo, hi), and those it sees whole,
    [full_lo, full_hi). O(rows) numbers; `mask_info` builds the arrays."""

    spec: MaskSpec
    shape: tuple[int, int]  # (q_len, kv_len)
    offset: int  # query i at KV position offset + i
    blocks: tuple[int, int]  # (block_q, block_kv)
    is_dkv: bool
    dynamic: bool
    q_shards: int
    kv_shards: int
    lo: np.ndarray
    hi: np.ndarray
    full_lo: np.ndarray
    full_hi: np.ndarray

    @classmethod
    def of(cls, spec: MaskSpec, shape: tuple[int, int], offset: int, blocks: tuple[int, int], *, is_dkv: bool,
           dynamic: bool = True, q_shards: int = 1, kv_shards: int = 1) -> Schedule:
        """The schedule of `spec` on a [q_len, kv_len] call (query i at KV position offset + i) with
        (block_q, block_kv) blocks, as `_process_mask(..., is_dkv, q_seq_shards=q_shards,
        kv_seq_shards=kv_shards, return_dynamic_grid=dynamic)` asks for it."""
        (q_len, kv_len), (bq, bkv) = shape, blocks
        for name, length, block, shards in (("q", q_len, bq, q_shards), ("kv", kv_len, bkv, kv_shards)):
            if length % (block * shards):
                raise ValueError(f"splash schedule: {shards} {name} shard(s) of {block}-token blocks must divide "
                                 f"{name}_len={length}")
        nq, nkv = q_len // bq, kv_len // bkv
        q_lo = np.arange(nq, dtype=np.int64) * bq + offset  # the first and last query position of each q block
        q_hi = q_lo + bq - 1
        kv_lo = np.arange(nkv, dtype=np.int64) * bkv
        kv_hi = kv_lo + bkv - 1
        left, right = spec.bounds  # a query at p sees keys in [p - left, p + right]; None: unbounded
        if not is_dkv:  # rows: q blocks; columns: kv blocks j
            rows, cols = nq, nkv
            # reached: kv_lo <= q_hi + right and kv_hi >= q_lo - left; whole: kv_hi <= q_lo + right and
            # kv_lo >= q_hi - left (the differences kv - q a block pair holds are [kv_lo - q_hi, kv_hi - q_lo])
            hi = np.full(rows, cols) if right is None else np.searchsorted(kv_lo, q_hi + right, "right")
            lo = np.zeros(rows, np.int64) if left is None else np.searchsorted(kv_hi, q_lo - left, "left")
            full_hi = np.full(rows, cols) if right is None else np.searchsorted(kv_hi, q_lo + right, "right")
            full_lo = np.zeros(rows, np.int64) if left is None else np.searchsorted(kv_lo, q_hi - left, "left")
        else:  # rows: kv blocks; columns: q blocks i, the same conditions solved for i
            rows, cols = nkv, nq
            lo = np.zeros(rows, np.int64) if right is None else np.searchsorted(q_hi, kv_lo - right, "left")
            hi = np.full(rows, cols) if left is None else np.searchsorted(q_lo, kv_hi + left, "right")
            full_lo = np.zeros(rows, np.int64) if right is None else np.searchsorted(q_lo, kv_hi - right, "left")
            full_hi = np.full(rows, cols) if left is None else np.searchsorted(q_hi, kv_lo + left, "right")
        hi = np.maximum(hi, lo)
        full_lo, full_hi = np.clip(full_lo, lo, hi), np.clip(full_hi, lo, hi)
        full_hi = np.maximum(full_hi, full_lo)
        return cls(spec, shape, offset, blocks, is_dkv, dynamic, q_shards, kv_shards, lo, hi, full_lo, full_hi)

    # ---- shape of the schedule ----------------------------------------------------------------------
    @property
    def grid(self) -> tuple[int, int]:
        """(q blocks, kv blocks) of the whole call."""
        return self.shape[0] // self.blocks[0], self.shape[1] // self.blocks[1]

    @property
    def all_full(self) -> bool:
        """Every block full: no schedule, no mask function (a full mask)."""
        cols = self.grid[0] if self.is_dkv else self.grid[1]
        return self.spec.kind == "full" or bool(np.all((self.full_lo == 0) & (self.full_hi == cols)))

    def _shards(self) -> list[tuple[slice, int, int]]:
        """Per shard, q-shard-major as upstream concatenates them: (its rows, its first and last + 1
        column), global indices."""
        (nq, nkv), out = self.grid, []
        q_per, kv_per = nq // self.q_shards, nkv // self.kv_shards
        for a in range(self.q_shards):
            for b in range(self.kv_shards):
                q_range, kv_range = (a * q_per, (a + 1) * q_per), (b * kv_per, (b + 1) * kv_per)
                row_range, col_range = (kv_range, q_range) if self.is_dkv else (q_range, kv_range)
                out.append((slice(*row_range), *col_range))
        return out

    def _shard_counts(self, rows: slice, c0: int, c1: int) -> np.ndarray:
        """Entries per row of one shard in the dynamic grid (a dKV row reaching nothing: 1, its init)."""
        counts = np.clip(self.hi[rows], c0, c1) - np.clip(self.lo[rows], c0, c1)
        return np.maximum(counts, 1) if self.is_dkv else counts

    @property
    def entries(self) -> int:
        """Length of the schedule's arrays (all shards, padded): what the kernel keeps in SMEM."""
        if self.all_full:
            return 0
        if not self.dynamic:
            return self.grid[0] * self.grid[1]
        return len(self._shards()) * max(int(self._shard_counts(*s).sum()) for s in self._shards())

    @property
    def index_dtype(self) -> np.dtype | None:
        """dtype of the rows and columns (None: a static grid or no schedule, which have none)."""
        if self.all_full or not self.dynamic:
            return None
        largest = -1
        for rows, c0, c1 in self._shards():
            counts = self._shard_counts(rows, c0, c1)
            used = np.nonzero(counts)[0]
            if used.size:  # the last row with an entry, the last column of any entry (local indices)
                lo, hi = np.clip(self.lo[rows], c0, c1), np.clip(self.hi[rows], c0, c1)
                last_col = np.where(hi > lo, hi - 1 - c0, 0)  # a dKV row reaching nothing: its init at 0
                largest = max(largest, int(used[-1]), int(last_col.max()))
        return np.dtype(np.int32) if largest < 0 else _index_dtype(largest)  # no entry: empty int32, as upstream

    def smem_bytes(self, segments: bool) -> int:
        """SMEM the kernel keeps this schedule in; `segments`: the call has segment ids (a grid
        without indices is then refined over every block with int32 ones)."""
        blocks = self.grid[0] * self.grid[1]
        if self.index_dtype is not None:
            return self.entries * (2 * self.index_dtype.itemsize + 1 + _BOUNDS_BYTES)
        if segments:
            return refined_grid_bytes(blocks)
        return 0 if self.all_full else blocks  # a static block mask, int8

    def check_smem(self, kernel: str, segments: bool) -> None:
        """Refuses (ValueError) a schedule the chip's SMEM cannot hold, from counts alone."""
        check_smem(kernel, self.smem_bytes(segments), self._describe(segments))

    def _describe(self, segments: bool) -> str:
        (q_len, kv_len), (bq, bkv) = self.shape, self.blocks
        mask = {"causal": "causal", "full": "full", "local": f"window {self.spec.bounds}"}[self.spec.kind]
        if self.index_dtype is not None:
            per = 2 * self.index_dtype.itemsize + 1 + _BOUNDS_BYTES
            what = f"{self.entries:,} scheduled blocks x {per} B ({self.index_dtype.name} indices)"
        else:
            per = REFINED_BYTES if segments else 1
            what = f"{self.grid[0] * self.grid[1]:,} blocks x {per} B (every block{', segment ids' * segments})"
        return f"{mask} mask, {q_len} x {kv_len} tokens in {bq} x {bkv} blocks: {what}"

    # ---- the arrays -----------------------------------------------------------------------------------
    def mask_info(self) -> tuple[Any, Callable[..., Any] | None]:
        """(upstream's `MaskInfo` of fresh numpy arrays, the mask function or None)."""
        mask_info = _upstream.mask_info().MaskInfo
        if self.all_full:
            return mask_info(None, None, None, None, None, None, None), None
        rows_out, cols_out, block_mask_out, counts = [], [], [], []
        for rows, c0, c1 in self._shards():
            lo, hi = np.clip(self.lo[rows], c0, c1), np.clip(self.hi[rows], c0, c1)
            full_lo, full_hi = np.clip(self.full_lo[rows], c0, c1), np.clip(self.full_hi[rows], c0, c1)
            if self.dynamic:
                per_row = self._shard_counts(rows, c0, c1)
                total = int(per_row.sum())
                row = np.repeat(np.arange(per_row.size, dtype=np.int32), per_row)
                first = np.cumsum(per_row) - per_row  # each row's first entry
                col = (np.repeat(lo, per_row) + np.arange(total) - np.repeat(first, per_row)).astype(np.int32)
                block = np.where((col >= np.repeat(full_lo, per_row)) & (col < np.repeat(full_hi, per_row)), 2, 1)
                init = np.repeat(hi == lo, per_row)  # a dKV row reaching nothing: (row, 0), block mask 0
                col[init] = c0
                block[init] = 0
                rows_out.append(row)
                cols_out.append(col - c0)
                counts.append(total)
            else:  # every block of the shard, row-major
                col = np.arange(c0, c1)[None, :]
                block = np.where((col >= full_lo[:, None]) & (col < full_hi[:, None]), 2,
                                 np.where((col >= lo[:, None]) & (col < hi[:, None]), 1, 0)).reshape(-1)
            block_mask_out.append(block.astype(np.int32))
        if self.dynamic:
            longest = max(counts)
            pad = lambda x: np.pad(x, (0, longest - x.size), constant_values=-1)  # noqa: E731
            active_rows = _downcast(np.concatenate([pad(x) for x in rows_out]))
            active_cols = _downcast(np.concatenate([pad(x) for x in cols_out]))
            block_mask = _downcast(np.concatenate([pad(x) for x in block_mask_out]))
            num_active = np.array(counts, np.int32)
        else:
            active_rows = active_cols = num_active = None
            block_mask = _downcast(np.concatenate(block_mask_out))
        q_sequence = np.arange(self.shape[0], dtype=np.int32)
        return (mask_info(mask_next=None, active_rows=active_rows, active_cols=active_cols, block_mask=block_mask,
                          num_active_blocks=num_active, partial_mask_blocks=None, q_sequence=q_sequence),
                self.spec.function(self.offset))

    def sparsity(self) -> float:
        """The share of scheduled entries that are not skipped, as upstream's `make_splash_mha` computes
        it from the block mask (padding counts), from counts alone."""
        if self.all_full:
            return 1.0
        if self.dynamic and not self.is_dkv:
            return 1.0  # every entry (and every -1 of padding) is != 0
        skipped = 0
        for rows, c0, c1 in self._shards():
            counts = np.clip(self.hi[rows], c0, c1) - np.clip(self.lo[rows], c0, c1)
            skipped += int((counts == 0).sum()) if self.dynamic else int((c1 - c0) * counts.size - counts.sum())
        return (self.entries - skipped) / self.entries


def smem_budget() -> tuple[int, int, str]:
    """(bytes a schedule may take, the core's SMEM, the chip's name) for the chip being lowered for."""
    from jax.experimental.pallas import tpu as pltpu

    info = pltpu.get_tpu_info()
    return info.smem_capacity_bytes - SMEM_RESERVE, info.smem_capacity_bytes, str(info.chip_version)


def check_smem(kernel: str, needed: int, what: str) -> None:
    """Refuses (ValueError) a kernel call whose schedule takes more than the chip's SMEM allows."""
    budget, capacity, chip = smem_budget()
    if needed <= budget:
        return
    raise ValueError(
        f"tokamax splash attention: the {kernel} kernel's block schedule ({what}) takes {needed:,} B of SMEM; "
        f"TPU {chip} has {capacity:,} B per core, {budget:,} B of it for the schedule ({SMEM_RESERVE // 1024} KiB "
        "kept for the kernel's other scalars). Use fewer tokens per call, a sliding window (only the blocks it "
        "reaches are scheduled), or ring attention across chips (torch_ops.ring_attention; in JAX the "
        "ring_attention kernel module), whose per-chip kernel calls each take a part of the sequence.")
