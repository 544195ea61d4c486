"""Interpret-mode numerics of the public MoE router top-k (`ops.router_topk`), on CPU.

The reference is upstream's pure-JAX `router_topk/reference.py` (`rowmax_topk`), reached through the
kernel; the public call must run the Pallas kernel (checked in its jaxpr), not the XLA Op.
"""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest


def _scores(rows: int, experts: int) -> np.ndarray:
    r = np.random.default_rng(rows + experts)
    scores = r.random((rows, experts), dtype=np.float32)
    scores[1, 20:32] = 4.0  # a tie across the top-k boundary: the lowest expert ids win
    scores[2, : experts // 2] = np.nan  # NaN is never selected over a finite score
    return scores


# Exact: kernel and reference run the same max-and-mask passes on the same f32 values, so weights and
# expert ids match bit for bit.
@pytest.mark.parametrize(("chip", "rows", "experts", "k", "block_rows"),
                         [("v7x", 64, 512, 10, None), ("v6e", 40, 256, 8, 16)])
def test_values_and_ids(kernel, emulation, chip, rows, experts, k, block_rows):
    ops = kernel.ops
    implementation = "mosaic_tpu"
    if block_rows is not None:  # a caller's config: 40 rows in blocks of 16, the last one partial
        implementation = [ops.tpu.RouterTopK(config=ops.tpu.RouterTopKConfig(block_rows=block_rows))]
    scores = _scores(rows, experts)

    def fn(s):  # noqa: ANN001, ANN202
        return ops.router_topk(s, k, implementation=implementation)

    with emulation.interpret_on_cpu(chip), ops.config.cross_compile(True):
        assert "pallas_call" in str(jax.make_jaxpr(fn)(scores)), "the public call did not run the kernel"
        weights, ids = jax.jit(fn)(scores)
    reference = importlib.import_module(f"{kernel.__name__}._ported._src.ops.router_topk.reference")
    want_weights, want_ids = reference.rowmax_topk(scores, k)
    np.testing.assert_array_equal(np.asarray(ids), np.asarray(want_ids))
    np.testing.assert_array_equal(np.asarray(weights), np.asarray(want_weights))
