"""What upstream's splash kernels cost at the blocks the package runs them with: the forward kernel and the fused
backward (dq, dk, dv in one kernel), timed by the package's one roofline (`tokamax.roofline.seconds`).

Nothing in the package chooses splash blocks by a cost model: the blocks are upstream's config choice
(`pallas_mosaic_tpu`'s and its VJP Op's `_get_heuristics_config`, what `fixed_offset` binds), 1024 queries by
1024 keys computed 512 keys at a time where a padded length (`lengths.padded`) is a multiple of 1024, else 128 by
128; `blocks` restates that choice. This module prices it (`tools/chip/predict.py` compares it with the chip).

Visited blocks are the schedule's (`schedule.Schedule`, the blocks a mask reaches; causal: those on or below the
diagonal), and every visited block is computed whole (upstream's diagonal skips are off by default). Per visited
block and query head the forward does QK^T and PV, 2 bq bkv (d + dv) flops; the fused backward recomputes QK^T
and does dP = dO V^T, dV = P^T dO, dK = dS^T Q and dQ = dS K, 2 bq bkv (3 d + 2 dv). Grid steps: one per visited
block and query head (the dK/dV kernel also steps once through a key block no query reaches, to write it).

HBM traffic follows the pipeline (a block is fetched again only when its index changes between consecutive steps).
Forward, grid (heads, scheduled blocks row by row): q once per row, k and v per step; out and the two residuals
(logsumexp and max logits, upstream's 128 lanes of float32 per query) written once per row. Backward, rows are key
blocks: k and v once per row, dK and dV (float32, read and written through upstream's aliases for grouped heads)
once per row; q, dO, the logsumexp and di (8 sublanes of float32 per query) and the dq partial sum (read and
written, the query's dtype) per step. Around the backward kernel XLA computes di = rowsum(dO * O), zeroes the
three dq partial sums and adds them, and casts dK and dV: `outside_bytes`, timed serially at the HBM bandwidth.

`ROW_SECONDS` is the one measured figure: what a row's start and end cost beyond the roofline.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import roofline
from ..roofline import Chip
from .lengths import LARGE_BLOCK, padded
from .masks import MaskSpec
from .schedule import Schedule

ROW_SECONDS = 6.0e-9
"""Seconds per query (forward) or key (backward) of each kernel row on the v5e, beyond the roofline: a row's
start and end (the online softmax's initialisation, its finish: out scaled by 1/l, logsumexp = m + log l, and the
row's output blocks written back before the next row's run), which the pipeline does not overlap with the MXU.
Fitted, one figure, to the causal records of benchmarks/measured/v5e-2026-12-04-bench-a9c94e4.json (1024-token
blocks; Llama 3 8B's 32/8 heads of 128 at 8192 and 32768 tokens, forward and forward + backward, Gemma 3 4B's 8/4
heads of 256 at both lengths, forward): the roofline alone put the 8192-token forwards 37% (Llama) and 26% (Gemma)
under the chip, the 32768-token ones within 7%; 6.0 ns per query (6.1 us per row of 1024) puts all six within 12%
(-12% and +6% at Llama's 8192 tokens, forward and forward + backward, +4% and +10% at 32768; Gemma's forwards -11%
and +12%), the least largest error. Check, not fitted: causal splash at 131072 tokens forward + backward, 3.03 s as
issue 50 quotes it (taken here as Llama's heads, one sequence), predicted 3.21 s (+6%).
Per score element (the softmax's exp) the same records do not fit: the 8192-token forwards ask for ~2 ps per score,
the 32768-token ones for none. Other chips: `roofline.scaled`."""

F32 = 4
LANES = 128  # upstream's residuals: logsumexp and max logits broadcast over a lane row
CAUSAL = MaskSpec("causal")
SUBLANES = 8  # the backward's logsumexp and di: broadcast over a sublane tile


def blocks(q_len: int, kv_len: int) -> tuple[int, int, int]:
    """(block_q, block_kv, block_kv_compute) of upstream's config choice at the padded lengths, the same for the
    forward and the backward (`block_q_dkv`, `block_kv_dkv`, `block_kv_dkv_compute`)."""
    bq = LARGE_BLOCK if q_len >= LARGE_BLOCK and q_len % LARGE_BLOCK == 0 else 128
    large_kv = kv_len >= LARGE_BLOCK and kv_len % LARGE_BLOCK == 0
    return (bq, LARGE_BLOCK, 512) if large_kv else (bq, 128, 128)


@dataclasses.dataclass(frozen=True)
class SplashCost:
    """One splash kernel's cost over its whole grid."""

    kernel: str
    flops: int
    bytes_accessed: int
    steps: int
    row_tokens: int  # queries (forward) or keys (backward) summed over the kernel's rows and heads
    matmuls: tuple[tuple[int, int, int], ...]  # (m, n, k) of a step's matmuls (one compute slice)
    outside_bytes: int = 0  # XLA's work around the kernel (the backward's di, dq partial sums, casts)

    def mxu_fill(self, mxu: int) -> float:
        """The share of the MXU's `mxu` x `mxu` tiles the step's matmuls fill."""
        used = sum(m * n for m, n, _ in self.matmuls)
        tiles = sum(-(-m // mxu) * -(-n // mxu) * mxu * mxu for m, n, _ in self.matmuls)
        return used / tiles

    def seconds(self, on: Chip) -> float:
        """`roofline.seconds` of the kernel, with its rows' cost (`ROW_SECONDS`) and XLA's work around it serial."""
        serial = self.row_tokens * roofline.scaled(ROW_SECONDS, on) + self.outside_bytes / on.hbm_bandwidth
        return roofline.seconds(self.flops, self.bytes_accessed, self.steps, on, self.mxu_fill(on.mxu), serial=serial)


def _visits(spec: MaskSpec, q_len: int, kv_len: int, offset: int, bq: int, bkv: int, *, is_dkv: bool
            ) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of each scheduled step of one head, in the grid's order (forward: q block rows, kv block
    columns; dK/dV: kv block rows, q block columns), and whether the step computes (a dK/dV row no query reaches
    is stepped through once, at column 0, computing nothing)."""
    s = Schedule.of(spec, (q_len, kv_len), offset, (bq, bkv), is_dkv=is_dkv)
    reached = s.hi - s.lo
    per_row = np.maximum(reached, 1) if is_dkv else reached
    rows = np.repeat(np.arange(per_row.size), per_row)
    first = np.cumsum(per_row) - per_row
    cols = np.repeat(s.lo, per_row) + np.arange(int(per_row.sum())) - np.repeat(first, per_row)
    computes = np.repeat(reached > 0, per_row)
    return np.stack([rows, np.where(computes, cols, 0)]), computes


def _changes(index: np.ndarray) -> int:
    """Fetches of a block indexed by `index` over one head's steps: the first, and each change."""
    return int(index.size and 1 + np.count_nonzero(index[1:] != index[:-1]))


def forward(heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int, head_dim_v: int | None = None, *,
            itemsize: int = 2, spec: MaskSpec = CAUSAL, offset: int = 0, at: tuple[int, int, int] | None = None
            ) -> SplashCost:
    """The forward kernel at the padded lengths of a [q_len, kv_len] call (query i at key position offset + i), at
    upstream's blocks or `at` (block_q, block_kv, block_kv_compute)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    q_len, kv_len = padded(q_len), padded(kv_len)
    bq, bkv, bkv_c = at or blocks(q_len, kv_len)
    (rows, cols), computes = _visits(spec, q_len, kv_len, offset, bq, bkv, is_dkv=False)
    visited, q_rows = int(computes.sum()), _changes(rows)
    read = heads * (q_rows * bq * head_dim + _changes(cols) * bkv * (head_dim + dv)) * itemsize
    written = heads * q_rows * bq * (dv * itemsize + 2 * LANES * F32)
    return SplashCost("forward", heads * visited * 2 * bq * bkv * (head_dim + dv), read + written, heads * rows.size,
                      heads * q_rows * bq, ((bq, bkv_c, head_dim), (bq, dv, bkv_c)))


def backward(heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int, head_dim_v: int | None = None, *,
             itemsize: int = 2, spec: MaskSpec = CAUSAL, offset: int = 0, at: tuple[int, int, int] | None = None
             ) -> SplashCost:
    """The fused backward kernel (dq, dk, dv) and XLA's work around it, at the padded lengths, at upstream's blocks
    or `at` (block_q_dkv, block_kv_dkv, block_kv_dkv_compute)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    q_len, kv_len = padded(q_len), padded(kv_len)
    bq, bkv, bkv_c = at or blocks(q_len, kv_len)
    (rows, cols), computes = _visits(spec, q_len, kv_len, offset, bq, bkv, is_dkv=True)
    visited, kv_rows, q_fetches = int(computes.sum()), _changes(rows), _changes(cols)
    aliased = heads != kv_heads and kv_len // bkv > 2  # dK, dV accumulated over a group's heads in float32
    dkv = 2 * 2 * F32 if aliased else itemsize  # per element: read and written in float32, or written once
    per_q_block = bq * (2 * head_dim + dv) * itemsize + 2 * SUBLANES * bq * F32  # q, dq in, dO; lse, di
    read = heads * (kv_rows * bkv * (head_dim + dv) * itemsize + q_fetches * per_q_block)
    written = heads * (kv_rows * bkv * (head_dim + dv) * dkv + rows.size * bq * head_dim * itemsize)
    q_bytes, kv_bytes = heads * q_len * head_dim * itemsize, kv_heads * kv_len * (head_dim + dv) * itemsize
    outside = (2 * heads * q_len * dv * itemsize  # di = rowsum(dO * O)
               + 2 * heads * SUBLANES * q_len * F32  # logsumexp and di broadcast over sublanes
               + 3 * q_bytes + 4 * q_bytes  # three dq partial sums zeroed, then read and added
               + (3 * kv_bytes if aliased else 0))  # dK and dV cast from float32
    return SplashCost("backward", heads * visited * 2 * bq * bkv * (3 * head_dim + 2 * dv), read + written,
                      heads * rows.size, heads * kv_rows * bkv,
                      ((bkv_c, bq, head_dim), (bkv_c, bq, dv), (bkv_c, dv, bq), (bkv_c, head_dim, bq),
                       (bq, head_dim, bkv_c)), outside)


def seconds(heads: int, kv_heads: int, length: int, head_dim: int, on: Chip, *, backward_pass: bool = False,
            itemsize: int = 2, spec: MaskSpec = CAUSAL) -> float:
    """Self-attention over `length` tokens (one sequence): the forward, and with `backward_pass` the backward."""
    args = (heads, kv_heads, length, length, head_dim)
    total = forward(*args, itemsize=itemsize, spec=spec).seconds(on)
    return total + (backward(*args, itemsize=itemsize, spec=spec).seconds(on) if backward_pass else 0.0)
