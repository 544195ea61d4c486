"""The Torch SparseCore ragged gather (TPU only): the clear refusal on CPU, the shared checks (fakes against JAX
shapes, symbolic tracing and one graph for two output sizes on meta tensors, the public Op in the lowering) and
bad calls. Shapes as tests/jax/public/ragged_gather_cases.py."""

from __future__ import annotations

import pytest
import torch

from . import checks


def _args(in_size: int = 64, out_size: int = 40, hidden: int = 128, dtype: torch.dtype = torch.float32,
          device: str = "cpu") -> tuple[torch.Tensor, ...]:
    i32 = dict(dtype=torch.int32, device=device)
    return (torch.zeros(in_size, hidden, dtype=dtype, device=device), torch.zeros(out_size, **i32),
            torch.tensor([3], **i32) if device == "cpu" else torch.zeros(1, **i32),
            torch.tensor([28], **i32) if device == "cpu" else torch.zeros(1, **i32))


@pytest.mark.kernels_ci
def test_refuses_on_cpu(ops):
    checks.refuses_on_cpu(lambda: ops.ragged_gather(*_args()), "ragged_gather")


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("out_size", "hidden", "dtype"), [(40, 128, torch.float32), (600, 256, torch.bfloat16),
                                                          (300, 128, torch.int8)])
def test_fakes_match_jax_shapes(ops, tokamax, out_size, hidden, dtype):
    f = checks.family(ops, "ragged_gather")
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device unless cross-compiling
        checks.fake_matches_jax(ops, ops.ragged_gather_op, f._ragged_gather_jax, *_args(64, out_size, hidden, dtype))


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(x: torch.Tensor, indices: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        return ops.ragged_gather(x, indices, start, end)

    checks.traces_symbolically(step, *_args(out_size=40, device="meta"))
    checks.compiles_once_for_two_sizes(step, _args(out_size=40, device="meta"), _args(out_size=600, device="meta"))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "ragged_gather")
    assert checks.public_op_classes(ops, f._ragged_gather_jax, *_args(64, 600, 256, torch.bfloat16)) == {
        "PallasTpuRaggedGather"}


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.ragged_gather_op)


def _with(i: int, value: object):  # noqa: ANN205
    def call(o):  # noqa: ANN001, ANN202
        args = list(_args())
        args[i] = value
        return o.ragged_gather(*args)
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_with(0, [[1.0]]), TypeError, "x must be a torch.Tensor, got list"),
    (_with(1, torch.zeros(40, dtype=torch.int32, device="meta")), ValueError, "all tensors must be on one device"),
    (_with(0, torch.zeros(64, 128, dtype=torch.float64)), TypeError, "x must be float32 or int32 or uint32"),
    (_with(0, torch.zeros(64)), ValueError, "x must be [in_size, hidden], got shape (64,)"),
    (_with(1, torch.zeros(40, dtype=torch.int64)), TypeError, "indices must be int32, got torch.int64"),
    (_with(1, torch.zeros(4, 10, dtype=torch.int32)), ValueError, "indices must be [out_size], got shape (4, 10)"),
    (_with(2, torch.zeros(1, dtype=torch.int64)), TypeError, "start must be int32, got torch.int64"),
    (_with(3, torch.zeros((), dtype=torch.int32)), ValueError, "end must be [1] = [1], got shape ()"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax ragged_gather") as info:
        call(ops)
    assert message in str(info.value)
