"""The block schedule of one ring call, built in the graph from positions: no [seq, seq] mask, no
host work that grows with the sequence.

A call is this chip's queries against one contiguous run of KV tokens (a chip's whole slice on the
contiguous ring, each of its two chunks on the head-tail ring). Upstream's kernel computes a key's
position as its index in the call's keys; giving it the queries' positions minus the run's first
key position (`q_sequence` = q_pos - base) makes upstream's own mask functions (causal, local
window) see the true positions, so partial blocks need no stored mask. Blocks are classified (empty
0, partial 1, full 2) from each query block's lowest and highest position, exact for positions that
are contiguous within a block (every layout here), as upstream's mask processing classifies them;
upstream's kernel then compacts the schedule with the segment ids (always passed), so empty blocks
are neither read nor computed. A static grid of [q blocks, kv blocks] int8 goes in (what the kernel
holds in SMEM is bounded by those pairs: `smem_bytes`).

`busiest_step` counts, on the host, the non-empty KV blocks each chip computes at each step: the
figure a ring step waits on.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..splash import _upstream
from ..splash.masks import MaskSpec
from . import layout

# bytes per scheduled pair after the kernel's compaction: int32 row and column, int8 block mask, int32
# bounds start and end (upstream's `_refine_mask_info_with_segments` and `find_bounds`)
SMEM_BYTES_PER_PAIR = 17


def _classes(spec: MaskSpec, lo: Any, hi: Any, kv_lo: Any, kv_hi: Any, xp: Any) -> Any:
    """int8 [q blocks, kv blocks]: 0 empty, 1 partial, 2 full, of query blocks [lo, hi] against key
    blocks [kv_lo, kv_hi] (positions in one frame)."""
    left, right = spec.bounds
    empty = xp.zeros(lo.shape[:1] + kv_lo.shape[1:], bool)
    full = xp.ones_like(empty)
    if right is not None:  # keys <= q + right
        empty = empty | (kv_lo > hi + right)
        full = full & (kv_hi <= lo + right)
    if left is not None:  # keys >= q - left
        empty = empty | (kv_hi < lo - left)
        full = full & (kv_lo >= hi - left)
    return xp.where(empty, 0, xp.where(full, 2, 1)).astype(xp.int8)


def _bounds(q_positions: Any, block_q: int, run_len: int, block_kv: int, xp: Any) -> tuple[Any, ...]:
    rows = q_positions.shape[0]
    blocks = q_positions.reshape(rows // block_q, block_q)
    kv_lo = (xp.arange(run_len // block_kv, dtype=xp.int32) * block_kv)[None, :]
    return blocks.min(axis=1)[:, None], blocks.max(axis=1)[:, None], kv_lo, kv_lo + block_kv - 1


def call_info(spec: MaskSpec, q_positions: jax.Array, run_len: int, block_q: int, block_kv: int,
              is_dkv: bool) -> Any:
    """Upstream's `MaskInfo` (a static grid) of one call: `q_positions` int32 [q_len], this chip's
    queries in the frame of the call's first key; the run's keys at 0 .. run_len - 1. `is_dkv`: the
    grid transposed (key blocks major), as upstream's dK/dV kernel walks it."""
    lib = _upstream.mask_info()
    if spec.kind == "full":  # every block full; the segment ids say which keys count
        return lib.MaskInfo(None, None, None, None, None, None, None)
    classes = _classes(spec, *_bounds(q_positions, block_q, run_len, block_kv, jnp), jnp)
    block_mask = (classes.T if is_dkv else classes).reshape(-1)
    return lib.MaskInfo(mask_next=None, active_rows=None, active_cols=None, block_mask=block_mask,
                        num_active_blocks=None, partial_mask_blocks=None, q_sequence=q_positions.astype(jnp.int32))


SMEM_CAPACITY = 1 << 20
"""SMEM per TensorCore on v5e, v5p, v6e and v7x (JAX's chip table), where no chip is known when tracing."""
SMEM_RESERVE = 64 << 10
"""Left to the kernel's own scalars (sinks, semaphores, the grid's bookkeeping)."""


def smem_bytes(q_len: int, run_len: int, block_q: int, block_kv: int) -> int:
    """What one call's compacted schedule holds in SMEM at most (every pair scheduled)."""
    return (q_len // block_q) * (run_len // block_kv) * SMEM_BYTES_PER_PAIR


def check_smem(q_len: int, run_len: int, block_q: int, block_kv: int, what: str) -> None:
    """Refuses, before anything is built, a call whose schedule would not fit the chip's SMEM."""
    try:
        from jax.experimental.pallas import tpu as pltpu

        capacity = pltpu.get_tpu_info().smem_capacity_bytes
    except Exception:  # noqa: BLE001 - no chip known when tracing (torch-tpu's export): every TPU v5+ has 1 MiB
        capacity = SMEM_CAPACITY
    need = smem_bytes(q_len, run_len, block_q, block_kv)
    if need > capacity - SMEM_RESERVE:
        pairs = need // SMEM_BYTES_PER_PAIR
        raise ValueError(
            f"tokamax ring_attention: the {what} kernel of one ring call schedules up to {pairs} (q block, KV block) "
            f"pairs of {block_q} x {block_kv} tokens ({q_len} queries against a KV run of {run_len}), "
            f"{SMEM_BYTES_PER_PAIR} bytes each in SMEM: {need} bytes, over the chip's {capacity} less "
            f"{SMEM_RESERVE} kept for the kernel; use more chips on the ring (fewer tokens per chip), or "
            "load_balanced=True (each call then holds half the KV)")


CAUSAL = MaskSpec("causal")


def busiest_step(seq_len: int, ring_size: int, balanced: bool, block: int, spec: MaskSpec = CAUSAL
                 ) -> dict[str, Any]:
    """Per ring step, the largest number of non-empty (q block, KV block) pairs any chip computes, and
    the total over the ring: {"per_step": [...], "max": int, "total": int, "chips_per_step": [[...]]}."""
    local = layout.check(seq_len, ring_size, balanced)
    runs = 2 if balanced else 1
    run_len = local // runs
    positions = [layout.chip_positions(r, local, ring_size, balanced) for r in range(ring_size)]
    chips_per_step = []
    for step in range(ring_size):
        counts = []
        for r in range(ring_size):
            kv = positions[(r - step) % ring_size]
            count = 0
            for run in range(runs):
                base = int(kv[run * run_len])
                classes = _classes(spec, *_bounds(positions[r] - base, block, run_len, block, np), np)
                count += int((classes > 0).sum())
            counts.append(count)
        chips_per_step.append(counts)
    per_step = [max(c) for c in chips_per_step]
    return {"per_step": per_step, "max": max(per_step), "total": int(np.sum(chips_per_step)),
            "chips_per_step": chips_per_step}
