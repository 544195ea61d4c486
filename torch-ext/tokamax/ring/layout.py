"""Where each token of a sequence sits on a ring of chips.

- Contiguous (upstream's ring): chip r holds positions [r L, (r + 1) L) of a sequence of N L tokens.
  With a causal mask the chip holding the last slice attends to every slice and the one holding
  the first to one; every ring step waits for the busiest chip.
- Head-tail (load-balanced; PyTorch's context-parallel head-tail balancer, MaxText's "dual chunk
  swap", Megatron's zigzag): the sequence cut into 2N chunks of C = L / 2 tokens, chip r holding
  chunk r and chunk 2N - 1 - r. Every chip then holds as many early as late tokens, so every chip
  computes the same number of causal blocks at every ring step (within one block row). Any N, odd
  included.

`order` gives the permutation; `to_ring_layout` / `from_ring_layout` apply it and its inverse to a
whole sequence (tokens, position ids, labels, segment ids, outputs). Shift labels (next-token
targets) before reordering: a mean or sum loss over the reordered tokens is the same loss.
"""

from __future__ import annotations

import functools

import numpy as np

LAYOUTS = ("contiguous", "head_tail")


def check(seq_len: int, ring_size: int, balanced: bool) -> int:
    """The tokens per chip; ValueError if the sequence does not split as the layout needs."""
    parts = ring_size * (2 if balanced else 1)
    if ring_size < 1 or seq_len % parts:
        what = "2 x ring_size chunks (the head-tail layout)" if balanced else "ring_size slices"
        raise ValueError(f"tokamax ring: a sequence of {seq_len} tokens does not split into {what}, "
                         f"ring_size {ring_size}")
    return seq_len // ring_size


@functools.cache
def order(seq_len: int, ring_size: int, balanced: bool = True) -> np.ndarray:
    """int64 [seq_len]: position p of the laid-out sequence holds token order[p] of the original
    (chip r's tokens are laid-out positions [r L, (r + 1) L)); read-only."""
    check(seq_len, ring_size, balanced)
    if not balanced:
        out = np.arange(seq_len)
    else:
        chunk = seq_len // (2 * ring_size)
        parts = [np.arange(c * chunk, (c + 1) * chunk) for r in range(ring_size) for c in (r, 2 * ring_size - 1 - r)]
        out = np.concatenate(parts)
    out.setflags(write=False)
    return out


@functools.cache
def inverse(seq_len: int, ring_size: int, balanced: bool = True) -> np.ndarray:
    """The inverse permutation of `order` (read-only)."""
    out = np.empty(seq_len, np.int64)
    out[order(seq_len, ring_size, balanced)] = np.arange(seq_len)
    out.setflags(write=False)
    return out


def chip_positions(chip: int, local_len: int, ring_size: int, balanced: bool) -> np.ndarray:
    """int32 [local_len]: the original positions of chip `chip`'s tokens."""
    if not balanced:
        return np.arange(chip * local_len, (chip + 1) * local_len, dtype=np.int32)
    chunk = local_len // 2
    return np.concatenate([np.arange(c * chunk, (c + 1) * chunk, dtype=np.int32)
                           for c in (chip, 2 * ring_size - 1 - chip)])


def to_ring_layout(x: np.ndarray, ring_size: int, axis: int = -1, balanced: bool = True) -> np.ndarray:
    """`x` with its sequence axis laid out for the ring (numpy or jax arrays: anything `take` reads)."""
    return x.take(order(x.shape[axis], ring_size, balanced), axis=axis)


def from_ring_layout(x: np.ndarray, ring_size: int, axis: int = -1, balanced: bool = True) -> np.ndarray:
    """The inverse of `to_ring_layout`: the original order back."""
    return x.take(inverse(x.shape[axis], ring_size, balanced), axis=axis)
