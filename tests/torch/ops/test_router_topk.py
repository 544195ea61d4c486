"""The Torch MoE router top-k (`router_topk`), run on CPU tensors in interpret mode (as the default emulated
chip, v6e), against a Torch reference written here (a stable descending sort, so ties go to the lowest
expert id, with NaN, -inf and -FLT_MAX ranked last); the shared checks (fakes against JAX shapes, symbolic
sizes, one graph for two token counts, upstream's public Op) and the argument checks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.jax.cases import rng

from . import checks

FLOOR = -3.0e38  # upstream's: scores at or below it (NaN, -inf, -FLT_MAX) are never chosen over a finite one


def _scores(tokens: int, experts: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    s = torch.from_numpy(rng(seed).random((tokens, experts), dtype=np.float32))
    s[1, 20:32] = 4.0  # a tie across the top-k boundary: the lowest expert ids win
    s[2, : experts // 2] = float("nan")  # NaN is never selected over a finite score
    s[3, ::2] = float("-inf")
    s[4, 1::3] = -torch.finfo(torch.float32).max
    s[5, 3:] = float("nan")  # 3 finite scores: the rest of the top k are the lowest unchosen ids, at the floor
    s[6] = float("nan")  # nothing finite: NaN weights, experts 0..k-1
    s[7, 5] = float("inf")
    return s.to(dtype)


def _topk_ref(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A stable descending sort of the float32 scores with everything at or below the floor (and NaN) at the
    floor: ties keep expert order. A row with no score above the floor gets NaN weights."""
    key = scores.float()
    key = torch.where(key > FLOOR, key, torch.tensor(FLOOR, dtype=torch.float32))
    values, ids = torch.sort(key, dim=-1, descending=True, stable=True)
    weights, ids = values[:, :k], ids[:, :k].to(torch.int32)
    return torch.where(weights[:, :1] <= FLOOR, float("nan"), weights), ids


# ---- Values on CPU (interpret mode) ---------------------------------------------------------------
# Exact: the kernel selects float32 values (casting bf16 and f16 exactly), so weights and ids match bit for bit.
@pytest.mark.parametrize(("tokens", "experts", "k", "dtype"), [
    (64, 512, 10, torch.float32),
    (40, 256, 8, torch.float16),
    (128, 384, 6, torch.bfloat16),
    (8, 128, 128, torch.float32),
], ids=["t64-e512-k10", "t40-e256-k8-f16", "t128-e384-k6-bf16", "k-all-experts"])
def test_values_and_ids(ops, tokens, experts, k, dtype):
    scores = _scores(tokens, experts, seed=tokens + experts, dtype=dtype)
    weights, ids = ops.router_topk(scores, k)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    assert weights.shape == ids.shape == (tokens, k)
    want_weights, want_ids = _topk_ref(scores, k)
    torch.testing.assert_close(ids, want_ids, rtol=0, atol=0)
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=0, equal_nan=True)
    # The special rows: ties to the lowest ids, NaN weights only where nothing is finite.
    assert ids[1, :k].tolist()[: min(k, 12)] == list(range(20, 20 + min(k, 12)))
    assert weights[6].isnan().all() and ids[6].tolist() == list(range(k))
    assert not weights[:6].isnan().any()


def test_oversized_block_raises_upstreams_error(ops):
    # 512 rows of 4224 experts: a 8.25 MiB float32 block, over upstream's 8 MiB budget for its kernel.
    with pytest.raises(NotImplementedError, match="VMEM budget"):
        ops.router_topk(torch.zeros(512, 4224), 8)


# ---- The shared checks --------------------------------------------------------------------------
@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fakes_match_jax_shapes(ops, tokamax, dtype):
    f = checks.family(ops, "router_topk")
    checks.fake_matches_jax(ops, ops.router_topk_op, f._router_topk_jax, torch.zeros(40, 256, dtype=dtype), 8)
    checks.assert_in_build_namespace(tokamax, ops.router_topk_op)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(scores: torch.Tensor) -> torch.Tensor:
        weights, ids = ops.router_topk(scores, 8)
        return weights * ids

    checks.traces_symbolically(step, torch.zeros(40, 256, device="meta"))
    checks.compiles_once_for_two_sizes(step, (torch.zeros(40, 256, device="meta"),),
                                       (torch.zeros(96, 256, device="meta"),))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", ["v6e", "v7x"])
def test_runs_upstreams_public_op(ops, chip):
    f = checks.family(ops, "router_topk")
    classes = checks.public_op_classes(ops, f._router_topk_jax, torch.zeros(64, 512), 10, chip=chip)
    assert classes == {"PallasTpuRouterTopK"}


# ---- Argument checks ----------------------------------------------------------------------------
_BAD = [
    (torch.zeros(16, 64, dtype=torch.float64), 4, TypeError, "scores must be float32 or bfloat16 or float16"),
    (torch.zeros(16, 64, dtype=torch.int32), 4, TypeError, "scores must be float32 or bfloat16 or float16"),
    (torch.zeros(2, 16, 64), 4, ValueError, r"scores must be \[tokens, experts\]"),
    (torch.zeros(64), 4, ValueError, r"scores must be \[tokens, experts\]"),
    (np.zeros((16, 64), np.float32), 4, TypeError, "scores must be a torch.Tensor"),
    (None, 4, TypeError, "scores must be a torch.Tensor, got None"),
    (torch.zeros(16, 64), 0, ValueError, r"k must be an int in \[1, experts=64\], got 0"),
    (torch.zeros(16, 64), 65, ValueError, r"k must be an int in \[1, experts=64\], got 65"),
    (torch.zeros(16, 64), 4.0, ValueError, r"k must be an int in \[1, experts=64\]"),
    (torch.zeros(16, 64), True, ValueError, r"k must be an int in \[1, experts=64\]"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("scores", "k", "error", "message"), _BAD,
                         ids=[f"{i}-" + re.sub(r"\W+", "_", m)[:40] for i, (*_, m) in enumerate(_BAD)])
def test_bad_arguments_are_refused(ops, scores, k, error, message):
    with pytest.raises(error, match=f"tokamax router_topk: {message}"):
        ops.router_topk(scores, k)
