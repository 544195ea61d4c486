"""Upstream's benchmarking on JAX alone: wall-clock timing works anywhere; XProf and CUPTI refuse."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tests.jax.autotuning import calls


@pytest.mark.kernels_ci
def test_benchmark_times_a_standardized_function_by_wall_clock(kernel):
    f, x = kernel.ops.standardize_function(lambda a, b: jnp.tanh(a @ b), jax.ShapeDtypeStruct((64, 64), jnp.float32),
                                           jax.ShapeDtypeStruct((64, 64), jnp.float32))
    data = kernel.ops.benchmark(f, x, iterations=3)
    assert isinstance(data, kernel.ops.BenchmarkData)
    assert len(data.evaluation_times_ms) == 3 and data.median_evaluation_time_ms > 0
    assert data.compile_time_ms > 0 and data.lower_time_ms > 0 and data.metadata == {}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("method", ["xprof", "hermetic_xprof"])
def test_xprof_timing_says_it_needs_xprof(kernel, method):
    f, x = kernel.ops.standardize_function(jnp.sin, jax.ShapeDtypeStruct((8,), jnp.float32))
    with pytest.raises(NotImplementedError, match=rf"timing method '{method}' needs xprof, which "
                                                  r"kernels-community/tokamax does not ship"):
        kernel.ops.benchmark(f, x, method=method)


@pytest.mark.kernels_ci
def test_cupti_timing_is_refused_off_gpu_as_upstream_refuses_it(kernel):
    f, x = kernel.ops.standardize_function(jnp.sin, jax.ShapeDtypeStruct((8,), jnp.float32))
    with pytest.raises(ValueError, match="CUPTI profiling is only supported on GPU"):
        kernel.ops.benchmark(f, x, method="cupti")


def test_bound_arguments_benchmark_runs_the_op(tuned, kernel, emulation):
    """`BoundArguments.benchmark()` (forward and VJP) in interpret mode: the machinery, not a timing."""
    with kernel.ops.config.cross_compile(True), emulation.interpret_on_cpu(calls.CHIP), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(calls.CHIP)):
        bound = tuned["bound"].op.replace(config=tuned["heuristic"]).bind(**dict(tuned["bound"].arguments))
        for mode in ("forward", "forward_and_vjp"):
            data = bound.benchmark(mode)
            assert len(data.evaluation_times_ms) == 5 and data.peak_memory_mb is not None
