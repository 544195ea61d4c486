"""The lengths splash attention runs at.

Upstream's kernel takes lengths that its blocks divide, and its config choice picks 128-token blocks
unless a length is a multiple of 1024 (then 1024). Shorter or odd lengths are padded at the end:
`padded` rounds up to a multiple of 128, or of 1024 when that adds at most an eighth (long sequences
then get the large blocks). A dynamic KV cache grows by one token per step; its KV length is padded
(on the Torch side, before the kernel's export) to `bucket(n)`, so that one export serves many steps;
the new tokens of a cache step (1 when decoding, a few when a draft is verified, a chunk of a
prompt) to `query_bucket(n)`.
"""

from __future__ import annotations

BLOCK = 128
"""Every kernel length is a multiple of this (a TPU lane row; upstream's smallest block)."""
LARGE_BLOCK = 1024
"""Upstream's heuristics take 1024-token blocks for lengths that are multiples of it."""


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def padded(n: int) -> int:
    """The length a sequence of `n` tokens runs at: a multiple of 128; of 1024 if that adds <= n / 8."""
    if n < 1:
        raise ValueError(f"a sequence length must be positive, got {n}")
    large = _round_up(n, LARGE_BLOCK)
    if n >= LARGE_BLOCK and (large - n) * 8 <= n:
        return large
    return _round_up(n, BLOCK)


def bucket(n: int) -> int:
    """The KV length a dynamic cache of `n` tokens is padded to: a multiple of 128 up to 1024, then
    steps of 2^(ceil(log2 n) - 3) (four per doubling, at most a quarter of padding), so a cache that
    grows to n > 1024 tokens passes through 8 + 4 * ceil(log2(n / 1024)) buckets (16 up to 4096)."""
    if n < 1:
        raise ValueError(f"a KV length must be positive, got {n}")
    step = max(BLOCK, 1 << max((n - 1).bit_length() - 3, 0))
    return padded(_round_up(n, step))


def query_bucket(n: int) -> int:
    """The length `n` new tokens of a cache step are padded to: the next power of two up to 128 (a
    decode step's single token stays 1: its rows are folded, and padding would multiply them),
    then `padded(n)`."""
    if n < 1:
        raise ValueError(f"a query length must be positive, got {n}")
    return 1 << (n - 1).bit_length() if n <= BLOCK else padded(n)
