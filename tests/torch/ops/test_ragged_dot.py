"""The Torch ragged-dot family beyond tests/torch/test_ops.py: upstream's `ragged_dot` name, the shared
checks (fakes against JAX shapes, symbolic tracing, one graph for two sizes, the public Op)."""

from __future__ import annotations

import pytest
import torch

from .checks import (
    assert_in_build_namespace,
    compiles_once_for_two_sizes,
    fake_matches_jax,
    family,
    public_op_classes,
    randn,
    traces_symbolically,
)


@pytest.mark.kernels_ci
def test_ragged_dot_is_gmm_without_transposition(ops, tokamax):
    lhs, rhs = randn(256, 128, seed=1), randn(2, 128, 128, seed=2)
    sizes = torch.tensor([100, 156], dtype=torch.int32)
    torch.testing.assert_close(ops.ragged_dot(lhs, rhs, sizes), ops.gmm(lhs, rhs, sizes), rtol=0, atol=0)
    want = torch.cat([lhs[:100].double() @ rhs[0].double(), lhs[100:].double() @ rhs[1].double()])
    torch.testing.assert_close(ops.ragged_dot(lhs, rhs, sizes).double(), want, rtol=1e-5, atol=1e-4)
    assert_in_build_namespace(tokamax, ops.gmm_op, ops.gmm_bwd_op, ops.tgmm_op, ops.tgmm_v2_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_fakes_match_jax_shapes(ops, transpose_rhs):
    f = family(ops, "ragged_dot")
    lhs, rhs = torch.zeros(200, 128), torch.zeros(3, 256, 128) if transpose_rhs else torch.zeros(3, 128, 256)
    sizes = torch.zeros(3, dtype=torch.int32)
    fake_matches_jax(ops, ops.gmm_op, f._gmm_jax, lhs, rhs, sizes, transpose_rhs)
    fake_matches_jax(ops, ops.gmm_bwd_op, f._gmm_bwd_jax, lhs, rhs, sizes, torch.zeros(200, 256), transpose_rhs)
    fake_matches_jax(ops, ops.tgmm_op, f._tgmm_jax, lhs, torch.zeros(200, 64), sizes)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(lhs: torch.Tensor, rhs: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        return ops.ragged_dot(lhs, rhs, sizes)

    rhs, sizes = torch.zeros(2, 128, 64, device="meta"), torch.zeros(2, dtype=torch.int32, device="meta")
    traces_symbolically(step, torch.zeros(320, 128, device="meta"), rhs, sizes)
    compiles_once_for_two_sizes(step, (torch.zeros(320, 128, device="meta"), rhs, sizes),
                                (torch.zeros(448, 128, device="meta"), rhs, sizes))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = family(ops, "ragged_dot")
    args = (torch.zeros(256, 128, dtype=torch.bfloat16), torch.zeros(2, 128, 256, dtype=torch.bfloat16),
            torch.zeros(2, dtype=torch.int32), False)
    assert public_op_classes(ops, f._gmm_jax, *args) == {"PallasMosaicTpuRaggedDot"}
