"""The port's fix over upstream in splash's backward (`dq_sum`, port.kdl): dq's partials added element by element
in float32, one fusion in torch-tpu's compile as in JAX's (upstream's `sum(axis=0)` was a float32 reduce written to
HBM and a second pass rounding it there: docs/torch-chip.md). The same arithmetic as upstream's; upstream's own
within `as_released()`, which the identity checks compare under."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.splash.cases import CASES, lower, ours


@pytest.fixture(scope="module")
def dq_sum(get):  # noqa: ANN001, ANN201
    return get("_src.ops.experimental.tpu.splash_attention.dq_sum")


@pytest.mark.kernels_ci
def test_three_bf16_partials_add_to_their_float32_sum_rounded_once(dq_sum):
    """The fix gives float64's sum of the three bf16 partials within two float32 roundings, and rounded to bf16 the
    values upstream's `sum(axis=0)` gives (the same float32 sum rounded once; an element can differ only where the
    two summation orders straddle a bf16 rounding boundary)."""
    partials = jnp.asarray(np.random.default_rng(7).normal(size=(3, 4, 256, 128)), jnp.bfloat16)
    got = dq_sum.add(partials)
    assert got.dtype == jnp.float32
    exact = np.asarray(partials, np.float64)
    # two float32 additions, each rounded by at most 2^-24 of the magnitudes added so far
    bound = 2 ** -23 * np.abs(exact).sum(0)
    assert np.all(np.abs(np.asarray(got, np.float64) - exact.sum(0)) <= bound)
    with dq_sum.as_released():
        released = dq_sum.add(partials)
    assert released.dtype == jnp.bfloat16
    mismatch = np.mean(np.asarray(got.astype(jnp.bfloat16)) != np.asarray(released))
    assert mismatch < 1e-3, mismatch
    many = jnp.ones((6, 8, 128), jnp.float32)  # past 4 partials: upstream's reduce, as released
    assert jnp.array_equal(dq_sum.add(many), many.sum(0))


@pytest.mark.kernels_ci
def test_the_backward_adds_dq_without_a_reduce_and_as_released_with_upstreams(kernel, dq_sum, emulation):
    """The backward's module for the v5e: with the fix no `reduce` over dq's partials, as released upstream's."""
    case = next(c for c in CASES if c.id == "window128-h8kv2-1024/grad")

    def module() -> str:
        return lower(ours(kernel, case), case, "v5e", kernel.ops.config.cross_compile, emulation)

    def dq_reduces(text: str) -> list[str]:  # a reduce whose result is dq's shape, [batch, heads, len, dim]
        return [line for line in text.splitlines()
                if "stablehlo.reduce" in line and line.rstrip().endswith("-> tensor<2x8x1024x128xf32>")]

    fixed = module()
    with dq_sum.as_released():
        released = module()
    assert len(dq_reduces(released)) == 1, "upstream's sum over the partials"
    assert dq_reduces(fixed) == []
