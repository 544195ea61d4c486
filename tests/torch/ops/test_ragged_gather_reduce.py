"""The Torch SparseCore ragged gather reduce, the MoE combine (TPU7x, TPU only): the clear refusal on CPU, the
shared checks (fakes against JAX shapes, symbolic tracing and one graph for two route counts on meta tensors, the
public Op in the v7x lowering) and bad calls. Shapes as tests/jax/public/ragged_gather_reduce_cases.py: upstream's
Op runs its pure-JAX reference for an x small against VMEM, so the lowering takes an 8192 x 2048 x."""

from __future__ import annotations

import pytest
import torch

from . import checks

CHIP = "v7x"


def _args(rows: int = 128, hidden: int = 256, routes: int = 128, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.zeros(rows, hidden, dtype=torch.bfloat16, device=device),
            torch.zeros(routes, dtype=torch.int32, device=device),
            torch.zeros(routes, dtype=torch.bfloat16, device=device),
            torch.ones(routes, dtype=torch.bool, device=device))


@pytest.mark.kernels_ci
def test_refuses_on_cpu(ops):
    checks.refuses_on_cpu(lambda: ops.ragged_gather_reduce(*_args(), 2), "ragged_gather_reduce")


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("rows", "hidden", "routes", "group"), [(8192, 2048, 1024, 2), (128, 256, 280, 4)])
def test_fakes_match_jax_shapes(ops, tokamax, rows, hidden, routes, group):
    """The kernel's shapes (a large x) and the reference path's (a small one) alike."""
    f = checks.family(ops, "ragged_gather_reduce")
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device unless cross-compiling
        checks.fake_matches_jax(ops, ops.ragged_gather_reduce_op, f._ragged_gather_reduce_jax,
                                *_args(rows, hidden, routes), group, chip=CHIP)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return ops.ragged_gather_reduce(x, indices, weights, mask, 2)

    checks.traces_symbolically(step, *_args(8192, 2048, 1024, device="meta"))
    checks.compiles_once_for_two_sizes(step, _args(8192, 2048, 1024, device="meta"),
                                       _args(8192, 2048, 2048, device="meta"))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "ragged_gather_reduce")
    assert checks.public_op_classes(ops, f._ragged_gather_reduce_jax, *_args(8192, 2048, 1024), 2, chip=CHIP) == {
        "PallasTpuRaggedGatherReduce"}


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.ragged_gather_reduce_op)


def _with(i: int, value: object, group: object = 2):  # noqa: ANN205
    def call(o):  # noqa: ANN001, ANN202
        args = list(_args())
        if i >= 0:
            args[i] = value
        return o.ragged_gather_reduce(*args, group)
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_with(0, "x"), TypeError, "x must be a torch.Tensor, got str"),
    (_with(3, torch.ones(128, dtype=torch.bool, device="meta")), ValueError, "all tensors must be on one device"),
    (_with(0, torch.zeros(128, 256)), TypeError, "x must be bfloat16, got torch.float32"),
    (_with(0, torch.zeros(2, 128, 256, dtype=torch.bfloat16)), ValueError, "x must be [rows, hidden], got shape"),
    (_with(1, torch.zeros(128, dtype=torch.int64)), TypeError, "indices must be int32, got torch.int64"),
    (_with(1, torch.zeros(128, 1, dtype=torch.int32)), ValueError, "indices must be [routes], got shape (128, 1)"),
    (_with(2, torch.zeros(128, dtype=torch.float16)), TypeError, "topk_weights must be bfloat16 or float32"),
    (_with(2, torch.zeros(64, dtype=torch.bfloat16)), ValueError,
     "topk_weights must be [routes] = [128], got shape (64,)"),
    (_with(3, torch.ones(128, dtype=torch.int32)), TypeError, "valid_rows_mask must be bool, got torch.int32"),
    (_with(3, torch.ones(127, dtype=torch.bool)), ValueError, "valid_rows_mask must be [routes] = [128]"),
    (_with(-1, None, group=0), ValueError, "reduce_group_size must be a positive int, got 0"),
    (_with(-1, None, group=3), ValueError, "the 128 routes must be a multiple of reduce_group_size=3"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax ragged_gather_reduce") as info:
        call(ops)
    assert message in str(info.value)
