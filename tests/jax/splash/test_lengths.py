"""The lengths splash runs at (`padded`) and a dynamic cache's KV buckets (`bucket`), against the
rules their docstrings and the README state."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.kernels_ci


def test_padded_lengths(kernel):
    padded = kernel.splash.padded
    assert [padded(n) for n in (1, 37, 128, 129, 200, 1000, 1024, 1025, 1100, 4000, 8191, 9000)] == [
        128, 128, 128, 256, 256, 1024, 1024, 1152, 1152, 4096, 8192, 9216]
    for n in range(1, 20000, 7):
        p = padded(n)
        assert p >= n and p % 128 == 0 and p - n < 1024
        assert p % 1024 == 0 or p - n < 128, n  # 1024-multiples only where they add <= n/8
        if p % 1024 == 0 and p - n >= 128:
            assert (p - n) * 8 <= n, n


def test_buckets_bound_exports_and_padding(kernel):
    splash = kernel.splash
    buckets = {splash.bucket(n) for n in range(1, 4097)}
    assert len(buckets) == 16 and max(buckets) == 4096  # a cache growing to 4096 tokens: 16 exports
    for n in range(1025, 40000, 11):
        b = splash.bucket(n)
        assert n <= b <= n * 1.25, n  # at most a quarter of padding past 1024
    for n in range(1, 40000, 3):
        b = splash.bucket(n)
        assert splash.padded(b) == b, n  # the kernel pads a bucket no further
        assert splash.bucket(b) == b


def test_lengths_refuse_nonsense(kernel):
    with pytest.raises(ValueError, match="positive"):
        kernel.splash.padded(0)
    with pytest.raises(ValueError, match="positive"):
        kernel.splash.bucket(0)


def test_query_buckets(kernel):
    query_bucket = kernel.splash.query_bucket
    assert [query_bucket(n) for n in (1, 2, 3, 5, 37, 64, 65, 128, 129, 1000)] == [
        1, 2, 4, 8, 64, 64, 128, 128, 256, 1024]
    with pytest.raises(ValueError, match="positive"):
        query_bucket(0)
