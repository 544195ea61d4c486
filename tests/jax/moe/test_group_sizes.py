"""Group sizes under `jit` (traced: their values unknown until the device runs): clipped on the device so that the
kernel never reads or writes out of bounds and nothing comes back NaN, and flagged by a `checkify` check that
names the op and the sizes where they are bad (not where they are good), which `jax.export` takes (the Torch ops
export the op for torch-tpu). Zero rows give the empty result and empty (or zero) gradients. Concrete sizes are
refused: tests/errors/ragged.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

M, K, N = 256, 128, 128


def _operands():  # noqa: ANN202
    r = np.random.default_rng(3)
    return (jnp.asarray(r.standard_normal((M, K)), jnp.float32),
            jnp.asarray(r.standard_normal((4, K, N)) / np.sqrt(K), jnp.float32))


def _clipped_reference(lhs, rhs, sizes):  # noqa: ANN001, ANN202
    """What the clipped sizes mean: negatives 0, the running sum cut at the rows (the lax op on those sizes)."""
    ends = np.minimum(np.cumsum(np.maximum(sizes, 0)), M)
    clipped = np.diff(ends, prepend=0).astype(np.int32)
    return np.asarray(jax.lax.ragged_dot(lhs, rhs, jnp.asarray(clipped), precision=jax.lax.Precision.HIGHEST))


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("sizes", "bad"), [([100, -20, 100, 50], True), ([200, 0, 100, 30], True),
                                            ([100, 0, 100, 50], False)], ids=["negative", "past-the-rows", "good"])
def test_traced_sizes_are_clipped_and_flagged(kernel, emulation, sizes, bad):
    lhs, rhs = _operands()
    f = jax.jit(lambda x, w, g: kernel.ops.ragged_dot(x, w, g, precision=jax.lax.Precision.HIGHEST,
                                                      implementation="mosaic"))
    with emulation.interpret_on_cpu("v5e"):
        out = np.asarray(f(lhs, rhs, jnp.asarray(sizes, jnp.int32)))  # no checkify: the check compiles to nothing
        error, checked = checkify.checkify(f)(lhs, rhs, jnp.asarray(sizes, jnp.int32))
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, _clipped_reference(lhs, rhs, np.asarray(sizes)), rtol=2e-5, atol=2e-4)
    np.testing.assert_array_equal(np.asarray(checked), out)
    if bad:
        said = error.get()
        assert said.startswith("tokamax ops.ragged_dot: group_sizes must be non-negative and sum to at most "
                               f"lhs's {M} rows, got [")
        assert [int(v) for v in said.split("got [", 1)[1].split("]", 1)[0].split()] == sizes
    else:
        assert error.get() is None


@pytest.mark.kernels_ci
def test_the_flag_exports(kernel):
    """The Torch ops' path: torch-tpu exports the op (`jax.export`, which refuses host callbacks)."""
    lhs, rhs = _operands()
    sizes = jnp.asarray([200, 0, 100, 30], jnp.int32)
    exported = jax.export.export(jax.jit(lambda x, w, g: kernel.ops.ragged_dot(x, w, g, implementation="xla")))(
        lhs, rhs, sizes)
    out = np.asarray(exported.call(lhs, rhs, sizes))
    np.testing.assert_allclose(out, _clipped_reference(lhs, rhs, np.asarray(sizes)), rtol=2e-5, atol=2e-4)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("implementation", [None, "mosaic"])
def test_zero_rows_give_the_empty_result_and_gradients(kernel, emulation, implementation):
    _, rhs = _operands()
    lhs, sizes = jnp.zeros((0, K), jnp.float32), jnp.zeros((4,), jnp.int32)

    def f(x, w):  # noqa: ANN001, ANN202
        return kernel.ops.ragged_dot(x, w, sizes, implementation=implementation)

    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        out, vjp = jax.vjp(f, lhs, rhs)
        dx, dw = vjp(jnp.zeros((0, N), jnp.float32))
    assert out.shape == (0, N) and dx.shape == (0, K)
    np.testing.assert_array_equal(np.asarray(dw), np.zeros((4, K, N)))
