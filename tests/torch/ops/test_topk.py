"""The Torch SparseCore top-k (TPU7x, TPU only): the clear refusal on CPU, the jax version it needs, the shared
checks (fake against JAX shapes, symbolic tracing and one graph for two row counts on meta tensors, the public
Op in the v7x lowering) and bad calls.

The kernel sets `jax.experimental.mosaic.OptLevel`, which jax 0.10.2 (the Torch tier's) lacks: the tests that
trace it are skipped there; the fakes and checks run with any jax.
"""

from __future__ import annotations

import jax
import jax.experimental.mosaic
import jax.numpy as jnp
import pytest
import torch

from . import checks

HAS_OPT_LEVEL = hasattr(jax.experimental.mosaic, "OptLevel")
needs_opt_level = pytest.mark.skipif(
    not HAS_OPT_LEVEL,
    reason=f"the kernel sets jax.experimental.mosaic.OptLevel (jax >= 0.11.1); this is jax {jax.__version__}")
CHIP = "v7x"
ROWS, N, K = 32, 2048, 16  # as tests/jax/public/topk_cases.py: one stage, 32 rows over the 32 subcores


@pytest.mark.kernels_ci
def test_refuses_on_cpu(ops):
    checks.refuses_on_cpu(lambda: ops.topk(torch.zeros(ROWS, N), K), "topk")
    checks.refuses_on_cpu(lambda: ops.topk(torch.zeros(ROWS, N), K, torch.full((ROWS,), N, dtype=torch.int32),
                                    return_scores=True), "topk")


@pytest.mark.kernels_ci
@pytest.mark.jax_floor
def test_says_which_jax_it_needs(ops, tokamax):
    f = checks.family(ops, "topk")
    scores = jax.ShapeDtypeStruct((ROWS, N), jnp.float32)
    with tokamax.ops.config.cross_compile(True):
        if not HAS_OPT_LEVEL:  # the Torch tier's jax 0.10.2
            with pytest.raises(RuntimeError, match=r"topk needs jax >= 0.11.1 \(jax.experimental.mosaic.OptLevel\)"):
                jax.eval_shape(lambda s: f._topk_jax(s, None, K, False), scores)
        else:
            assert jax.eval_shape(lambda s: f._topk_jax(s, None, K, False), scores)[0].shape == (ROWS, K)


@needs_opt_level
@pytest.mark.kernels_ci
@pytest.mark.parametrize(("lengths", "return_scores"), [(False, False), (True, True)])
def test_fakes_match_jax_shapes(ops, tokamax, lengths, return_scores):
    f = checks.family(ops, "topk")
    row_lengths = torch.zeros(ROWS, dtype=torch.int32) if lengths else None
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device unless cross-compiling
        checks.fake_matches_jax(ops, ops.topk_op, f._topk_jax, torch.zeros(ROWS, N), row_lengths, K, return_scores,
                                chip=CHIP)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(scores: torch.Tensor, row_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices, bits = ops.topk(scores, K, row_lengths, return_scores=True)
        return indices, bits

    def args(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(rows, N, device="meta"), torch.zeros(rows, dtype=torch.int32, device="meta")

    checks.traces_symbolically(step, *args(ROWS))
    checks.compiles_once_for_two_sizes(step, args(ROWS), args(48))


@pytest.mark.kernels_ci
def test_returns_upstreams_outputs(ops):
    """(indices, None) without return_scores, (indices, score bits) with: upstream's Torch op's outputs."""
    scores = torch.zeros(ROWS, N, device="meta")
    indices, bits = ops.topk(scores, K)
    assert (indices.shape, indices.dtype, bits) == ((ROWS, K), torch.int32, None)
    indices, bits = ops.topk(scores.to(torch.int32), K, return_scores=True)
    assert (bits.shape, bits.dtype) == ((ROWS, K), torch.int32)


@needs_opt_level
@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "topk")
    args = (torch.zeros(ROWS, N), torch.zeros(ROWS, dtype=torch.int32), K, True)
    assert checks.public_op_classes(ops, f._topk_jax, *args, chip=CHIP) == {"PallasTpuTopK"}


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.topk_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda o: o.topk([[1.0]], K), TypeError, "scores must be a torch.Tensor, got list"),
    (lambda o: o.topk(torch.zeros(ROWS, N), K, torch.zeros(ROWS, dtype=torch.int32, device="meta")),
     ValueError, "all tensors must be on one device"),
    (lambda o: o.topk(torch.zeros(ROWS, N, dtype=torch.bfloat16), K), TypeError,
     "scores must be float32 or int32, got torch.bfloat16"),
    (lambda o: o.topk(torch.zeros(N), K), ValueError, "scores must be [rows, n], got shape (2048,)"),
    (lambda o: o.topk(torch.zeros(ROWS, N), 0), ValueError, "k must be an int in [1, n=2048], got 0"),
    (lambda o: o.topk(torch.zeros(ROWS, 8), K), ValueError, "k must be an int in [1, n=8], got 16"),
    (lambda o: o.topk(torch.zeros(ROWS, N), K, torch.zeros(ROWS, dtype=torch.int64)), TypeError,
     "row_lengths must be int32, got torch.int64"),
    (lambda o: o.topk(torch.zeros(ROWS, N), K, torch.zeros(8, dtype=torch.int32)), ValueError,
     "row_lengths must be [rows] = [32], got shape (8,)"),
    (lambda o: o.topk(torch.zeros(ROWS, N), K, return_scores="yes"), TypeError, "return_scores must be a bool"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax topk") as info:
        call(ops)
    assert message in str(info.value)
