"""`splash.cost`'s flops and grid steps against an independent count: the (q block, kv block) pairs a dense
mask reaches, found by brute force in numpy, at the blocks upstream's config choice takes."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.kernels_ci


def _dense_blocks(length: int, block: int, left: int | None) -> int:
    """Pairs of `block`-token blocks holding at least one (query, key) pair the mask keeps: causal (key <= query),
    within `left` keys before the query if given."""
    q, k = np.arange(length)[:, None], np.arange(length)[None, :]
    keep = (k <= q) & (True if left is None else k >= q - left)
    n = length // block
    return int(keep.reshape(n, block, n, block).any(axis=(1, 3)).sum())


@pytest.mark.parametrize("length,block,left", [(4096, 1024, None), (8192, 1024, None), (640, 128, None),
                                               (8192, 1024, 2047), (896, 128, 200)])
def test_flops_and_steps_count_the_visited_blocks(kernel, length, block, left):  # noqa: ANN001
    cost = kernel.splash.cost
    spec = kernel.splash.MaskSpec("causal") if left is None else kernel.splash.MaskSpec("local", left, 0)
    heads, kv_heads, d, dv = 4, 2, 128, 64
    assert cost.blocks(length, length)[:2] == (block, block)
    visited = _dense_blocks(length, block, left)
    fwd = cost.forward(heads, kv_heads, length, length, d, dv, spec=spec)
    bwd = cost.backward(heads, kv_heads, length, length, d, dv, spec=spec)
    assert fwd.flops == heads * visited * (2 * block * block * d + 2 * block * block * dv)  # QK^T, PV
    # recomputed QK^T, dP = dO V^T, dV = P^T dO, dK = dS^T Q, dQ = dS K
    assert bwd.flops == heads * visited * 2 * block * block * (d + dv + dv + d + d)
    assert fwd.steps == bwd.steps == heads * visited  # every key block is reached here: no empty dK/dV row
    assert fwd.row_tokens == bwd.row_tokens == heads * length


def test_causal_visits_half_the_blocks_and_the_diagonal(kernel):  # noqa: ANN001
    """At 32768 tokens in 1024-token blocks: 32 * 33 / 2 blocks of 32 * 32, the diagonal computed whole."""
    fwd = kernel.splash.cost.forward(1, 1, 32768, 32768, 128)
    assert fwd.flops == 528 * 4 * 1024 * 1024 * 128
    assert fwd.flops > 4 * 32768 * 32768 * 128 / 2  # more than the causal half: the diagonal blocks whole


def test_an_unreached_key_block_is_stepped_through_without_flops(kernel):  # noqa: ANN001
    """A query offset past the first keys' window: the dK/dV kernel steps once through each key block no query
    reaches (to write its zero gradient), the forward does not visit it."""
    cost, splash = kernel.splash.cost, kernel.splash
    spec = splash.MaskSpec("local", 127, 0)
    fwd = cost.forward(1, 1, 128, 896, 128, spec=spec, offset=768)  # queries at keys 768..895: keys 641..895
    bwd = cost.backward(1, 1, 128, 896, 128, spec=spec, offset=768)
    assert cost.blocks(128, 896) == (128, 128, 128)
    assert fwd.flops == 2 * 4 * 128 * 128 * 128 and fwd.steps == 2  # key blocks 5 and 6
    assert bwd.flops == 2 * 10 * 128 * 128 * 128 and bwd.steps == 7  # and blocks 0 to 4 stepped through
