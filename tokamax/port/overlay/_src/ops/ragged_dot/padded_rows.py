"""Zeros for the rows of gmm's output past the last group (ours; port.kdl calls it at the end of gmm).

Upstream's gmm visits only the row tiles that hold a group's rows, and its store mask keeps what the output
buffer held for rows of no group in the last tile it visits: rows past `sum(group_sizes)` come back as whatever
memory held (NaN in Pallas's interpret mode), forward and in the backward's dlhs. Capacity-padded MoE routing
(a fixed number of rows per step) has such rows every step, and one NaN row gathered back into a token poisons
the step. `jax.lax.ragged_dot` gives zeros there; so does this.

The cost is in the padded rows only, never a pass over the whole output (a `jnp.where` over Mixtral's
16,384 x 14,336 output costs ~10% of the forward on a v5e), and those rows are written, not read: a Pallas call
on gmm's output in place (`input_output_aliases`) copies a block of zeros held in VMEM over them, `ALIGN`-row
aligned, by DMA. Only the `ALIGN` rows that hold the end are read and masked (in XLA). Nothing is written where the
groups cover every row. Where `ALIGN` does not divide m (a single row tile of at most 1024 rows, as the tile rule
takes it there) one masked pass over the output does it.

Measured on the v5e (benchmarks/measured/v5e-2026-12-06-bench-moe_padded-*.json), Mixtral's experts (16,384 x
4,096 -> 14,336) with 1,638 rows padded: these DMAs add 0.17 ms to the 11.45 ms forward (1.5%; the zeros' own
47 MB take 0.08 ms at the chip's HBM speed) and 0.22 ms to the 36.99 ms forward and backward (0.6%); fully used,
nothing (12.50 ms either way). Zero blocks written by XLA's in-place `dynamic_update_slice` in a
`lax.while_loop` added 0.26-0.47 ms to that forward: XLA reads its hoisted zero block for every update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ALIGN = 32
"""Rows of the sublane tile of the narrowest dtype (8-bit: 32; 16-bit: 16; 32-bit: 8): updates at multiples of it
stay on whole tiles."""
ZERO_BLOCK_BYTES = 2 << 20
"""The VMEM block of zeros each DMA copies (a multiple of `ALIGN` rows, at least `ALIGN`, at most `MAX_ROWS`)."""
MAX_ROWS = 512


def _block_rows(n_bytes_per_row: int) -> int:
    rows = ZERO_BLOCK_BYTES // max(n_bytes_per_row, 1) // ALIGN * ALIGN
    return max(ALIGN, min(MAX_ROWS, rows))


def _masked(out: jax.Array, start: jax.Array, end: jax.Array, run: jax.Array) -> jax.Array:
    """`out` with the `ALIGN` rows from `start` zero where they are at or past `end`, read and written where `run`."""
    iota = lax.broadcasted_iota(jnp.int32, (ALIGN, 1), 0)

    def mask(i_out: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        i, out = i_out
        piece = lax.dynamic_slice_in_dim(out, start, ALIGN, 0)
        piece = jnp.where(iota + start >= end, jnp.zeros_like(piece), piece)
        return i + 1, lax.dynamic_update_slice_in_dim(out, piece, start, 0)

    return lax.while_loop(lambda c: c[0] < run.astype(jnp.int32), mask, (jnp.int32(0), out))[1]


def _written(out: jax.Array, start: jax.Array, stop: jax.Array, interpret: bool) -> jax.Array:
    """`out` (rows a multiple of `ALIGN`) with rows [start, stop) zero (both multiples of `ALIGN`), in place: blocks
    of zeros from VMEM by DMA, then `ALIGN`-row pieces of the same block for what is left."""
    m = out.shape[0]
    rows = min(_block_rows(out.dtype.itemsize * (out.size // m)), m)

    def kernel(start_ref, stop_ref, _, out_ref, zeros, sem):  # noqa: ANN001 - Pallas refs
        zeros[...] = jnp.zeros_like(zeros)
        first, last = start_ref[0], stop_ref[0]
        blocks = (last - first) // rows
        pieces = (last - first - blocks * rows) // ALIGN

        def copy(offset: jax.Array, size: int) -> pltpu.AsyncCopyDescriptor:
            return pltpu.make_async_copy(zeros.at[pl.ds(0, size)],
                                         out_ref.at[pl.ds(pl.multiple_of(offset, ALIGN), size)], sem)

        def start_block(i: jax.Array, carry: None) -> None:
            copy(first + i * rows, rows).start()

        def start_piece(i: jax.Array, carry: None) -> None:
            copy(first + blocks * rows + i * ALIGN, ALIGN).start()

        lax.fori_loop(0, blocks, start_block, None)
        lax.fori_loop(0, pieces, start_piece, None)
        lax.fori_loop(0, blocks, lambda i, c: copy(first, rows).wait(), None)
        lax.fori_loop(0, pieces, lambda i, c: copy(first, ALIGN).wait(), None)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((rows, *out.shape[1:]), out.dtype), pltpu.SemaphoreType.DMA]),
        input_output_aliases={2: 0},
        interpret=interpret,
        name="tokamax_padded_rows_zeroed",
    )(start[None], stop[None], out)


def zeroed(out: jax.Array, end: jax.Array, interpret: bool = False) -> jax.Array:
    """`out` ([m, n]) with rows `end` to m zero, at the cost of those rows (see the module's docstring)."""
    m = out.shape[0]
    end = jnp.clip(end.astype(jnp.int32), 0, m)
    if m % ALIGN:  # rows off the tiles (only where one row tile is all of m, at most 1024 rows): one masked pass
        return jnp.where(lax.broadcasted_iota(jnp.int32, (m, 1), 0) >= end, jnp.zeros_like(out), out)
    cursor = (end + ALIGN - 1) // ALIGN * ALIGN  # the first aligned row past the end
    out = _masked(out, jnp.maximum(cursor - ALIGN, 0), end, end % ALIGN != 0)
    return _written(out, cursor, jnp.int32(m), interpret)
