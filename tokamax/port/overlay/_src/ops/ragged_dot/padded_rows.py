"""Zeros for the rows of gmm's output past the last group (ours; port.kdl calls it at the end of gmm).

Upstream's gmm visits only the row tiles that hold a group's rows, and its store mask keeps what the output
buffer held for rows of no group in the last tile it visits: rows past `sum(group_sizes)` come back as whatever
memory held (NaN in Pallas's interpret mode), forward and in the backward's dlhs. Capacity-padded MoE routing
(a fixed number of rows per step) has such rows every step, and one NaN row gathered back into a token poisons
the step. `jax.lax.ragged_dot` gives zeros there; so does this.

The cost is in the padded rows only, never a pass over the whole output (a `jnp.where` over Mixtral's
16,384 x 14,336 output costs ~10% of the forward on a v5e): zero blocks written in place (XLA keeps a
`lax.while_loop`'s carried buffer in place) at rows aligned to the sublane tile (`ALIGN`), blocks of `BLOCKS[0]`
rows from the first aligned row past the end, then smaller ones for what is left; the rows before that aligned row,
and the last rows where `ALIGN` does not divide m, are read and masked, `ALIGN` rows each. Nothing runs where the
groups cover every row. (Blocks written from the end row itself, unaligned, ran 0.27 ms of Mixtral's 11.5 ms forward
with 10% of the rows padded on the v5e, 2.4%; aligned blocks with the end's block read and masked 0.47 ms:
benchmarks/measured/v5e-2026-12-06-bench-moe_padded-*.json.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

BLOCKS = (512, 128, 16)
"""Rows per zero block, largest first: each level writes what the one before left (fewer than its own rows)."""
ALIGN = 16
"""Rows of a 16-bit dtype's sublane tile (a 32-bit one's is 8): aligned updates stay on whole tiles."""


def _masked(out: jax.Array, start: jax.Array, end: jax.Array, run: jax.Array) -> jax.Array:
    """`out` with the `ALIGN` rows from `start` zero where they are at or past `end`, read and written where `run`."""
    iota = lax.broadcasted_iota(jnp.int32, (ALIGN, 1), 0)

    def mask(i_out: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        i, out = i_out
        piece = lax.dynamic_slice_in_dim(out, start, ALIGN, 0)
        piece = jnp.where(iota + start >= end, jnp.zeros_like(piece), piece)
        return i + 1, lax.dynamic_update_slice_in_dim(out, piece, start, 0)

    return lax.while_loop(lambda c: c[0] < run.astype(jnp.int32), mask, (jnp.int32(0), out))[1]


def zeroed(out: jax.Array, end: jax.Array) -> jax.Array:
    """`out` ([m, n]) with rows `end` to m zero, at the cost of those rows (see the module's docstring)."""
    m = out.shape[0]
    end = jnp.clip(end.astype(jnp.int32), 0, m)
    if m < ALIGN:
        return jnp.where(lax.broadcasted_iota(jnp.int32, (m, 1), 0) >= end, jnp.zeros_like(out), out)
    aligned_m = m // ALIGN * ALIGN
    cursor = jnp.minimum((end + ALIGN - 1) // ALIGN * ALIGN, aligned_m)  # the first aligned row past the end
    out = _masked(out, jnp.maximum(cursor - ALIGN, 0), end, (end % ALIGN != 0) & (end < aligned_m))
    for rows in (r for r in BLOCKS if r <= aligned_m):
        zeros = jnp.zeros((rows, *out.shape[1:]), out.dtype)
        count = (aligned_m - cursor) // rows

        def write(i_out: tuple[jax.Array, jax.Array], zeros=zeros, rows=rows, start=cursor) -> tuple:  # noqa: ANN001
            i, out = i_out
            return i + 1, lax.dynamic_update_slice_in_dim(out, zeros, start + i * rows, 0)

        out = lax.while_loop(lambda c, count=count: c[0] < count, write, (jnp.int32(0), out))[1]
        cursor = cursor + count * rows
    # the last rows where ALIGN does not divide m (this block may also hold the end)
    return _masked(out, jnp.int32(m - ALIGN), end, jnp.asarray(m != aligned_m) & (end < m))
