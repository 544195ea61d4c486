"""The Torch grouped matmuls on CPU tensors (interpret mode) where the groups do not cover every row (capacity-padded
MoE routing): rows past sum(group_sizes) are zero forward and in dlhs, empty groups' drhs and tgmm's blocks zero,
against float64; and no rows at all give the empty result. Padding of 0 rows, part of a row tile, whole tiles."""

from __future__ import annotations

import pytest
import torch

from . import checks

K, N, M = 128, 256, 512
ROUTINGS = {"full": [100, 0, 212, 200], "partial-tile": [100, 0, 300, 100], "whole-tiles": [0, 128, 128, 0]}


def _reference(lhs, rhs, sizes, grad):  # noqa: ANN001, ANN202
    x, w, g = lhs.double(), rhs.double(), grad.double()
    out, dx, dw = torch.zeros(M, N, dtype=torch.float64), torch.zeros_like(x), torch.zeros_like(w)
    start = 0
    for e, size in enumerate(sizes.tolist()):
        rows = slice(start, start + size)
        out[rows], dx[rows], dw[e] = x[rows] @ w[e], g[rows] @ w[e].T, x[rows].T @ g[rows]
        start += size
    return out, dx, dw


@pytest.mark.kernels_ci
@pytest.mark.parametrize("routing", list(ROUTINGS))
def test_gmm_gives_zeros_past_the_groups_forward_and_backward(ops, routing):
    sizes = torch.tensor(ROUTINGS[routing], dtype=torch.int32)
    lhs = checks.randn(M, K, seed=1).requires_grad_()
    rhs = (checks.randn(len(sizes), K, N, seed=2) / K**0.5).requires_grad_()
    grad = checks.randn(M, N, seed=3)
    out = ops.gmm(lhs, rhs, sizes)
    out.backward(grad)
    want = _reference(lhs.detach(), rhs.detach(), sizes, grad)
    # float32 in interpret mode (the kernel's default precision rounds products as bf16 on the chip): ~2^-8 relative
    # per product, summed over k (or m) products of unit scale
    for got, ref in zip((out, lhs.grad, rhs.grad), want, strict=True):
        assert not torch.isnan(got).any()
        torch.testing.assert_close(got.double(), ref, rtol=2e-2, atol=0.1)
    end = int(sizes.sum())
    assert (out[end:] == 0).all() and (lhs.grad[end:] == 0).all()
    assert (rhs.grad[sizes == 0] == 0).all()
    drhs = ops.tgmm(lhs.detach(), grad, sizes)
    torch.testing.assert_close(drhs.double(), want[2], rtol=2e-2, atol=0.1)


@pytest.mark.kernels_ci
def test_no_rows_give_the_empty_result(ops):
    rhs = checks.randn(4, K, N, seed=2).requires_grad_()
    lhs = torch.zeros(0, K, requires_grad=True)
    out = ops.gmm(lhs, rhs, torch.zeros(4, dtype=torch.int32))
    assert out.shape == (0, N)
    out.sum().backward()
    assert lhs.grad.shape == (0, K) and (rhs.grad == 0).all()
