"""Interpret-mode numerics of the public ragged dot, values and gradients, on CPU.

The references are written here in numpy (float64, one matmul per group, rows assigned to
groups by their sizes), independently of the kernel and of `jax.lax.ragged_dot`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

SIZES = np.array([100, 0, 156], np.int32)  # an empty group; sizes off the 128-row tile
M, K, N = 256, 128, 256


def _operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = np.random.default_rng(7)
    return (r.standard_normal((M, K)).astype(np.float32), r.standard_normal((len(SIZES), K, N)).astype(np.float32),
            r.standard_normal((M, N)).astype(np.float32))


def _rows():  # noqa: ANN202 - (group, row slice) pairs
    ends = np.cumsum(SIZES)
    return [(g, slice(e - s, e)) for g, (s, e) in enumerate(zip(SIZES, ends, strict=True))]


def _reference(lhs: np.ndarray, rhs: np.ndarray, dout: np.ndarray, relu: bool):  # noqa: ANN202
    """out, d(sum(out * dout))/dlhs, .../drhs in float64."""
    lhs, rhs, dout = (x.astype(np.float64) for x in (lhs, rhs, dout))
    pre = np.zeros((M, N))
    for g, rows in _rows():
        pre[rows] = lhs[rows] @ rhs[g]
    out = np.maximum(pre, 0) if relu else pre
    dpre = dout * (pre > 0) if relu else dout
    dlhs, drhs = np.zeros_like(lhs), np.zeros_like(rhs)
    for g, rows in _rows():
        dlhs[rows] = dpre[rows] @ rhs[g].T
        drhs[g] = lhs[rows].T @ dpre[rows]
    return out, dlhs, drhs


# f32 in and out; the kernel accumulates in f32 over k=128 (forward, dlhs) or up to 156 rows (drhs),
# so results differ from float64 by summation order only: |err| ~ 1e-5 of values ~ 11-16.
TOL = dict(rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("implementation", ["mosaic", None])
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
def test_values_and_gradients(kernel, emulation, implementation, relu):
    lhs, rhs, dout = _operands()
    activation = jax.nn.relu if relu else None

    def loss(lhs, rhs):  # noqa: ANN001, ANN202
        out = kernel.ops.ragged_dot(lhs, rhs, jnp.asarray(SIZES), precision=jax.lax.Precision.HIGHEST,
                                    activation=activation, implementation=implementation)
        return jnp.sum(out * dout), out

    # Upstream's backward builds new Op instances that check the device; on a CPU host the Mosaic
    # kernel runs only with upstream's cross-compile option (which skips that check), as upstream.
    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        (_, out), (dlhs, drhs) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(lhs, rhs)
    want_out, want_dlhs, want_drhs = _reference(lhs, rhs, dout, relu)
    np.testing.assert_allclose(np.asarray(out), want_out, **TOL)
    np.testing.assert_allclose(np.asarray(dlhs), want_dlhs, **TOL)
    np.testing.assert_allclose(np.asarray(drhs), want_drhs, **TOL)


def test_a_caller_config_is_used(kernel, emulation):
    """`RaggedDot(config=...)` as an implementation runs that tiling (and still computes the product)."""
    lhs, rhs, dout = _operands()
    op = kernel.ops.tpu.RaggedDot(config=kernel.ops.tpu.RaggedDotConfig(tile_m=128, tile_k=128, tile_n=256))
    with emulation.interpret_on_cpu("v6e"):
        out = jax.jit(lambda a, b: kernel.ops.ragged_dot(a, b, jnp.asarray(SIZES), implementation=[op],
                                                         precision=jax.lax.Precision.HIGHEST))(lhs, rhs)
    np.testing.assert_allclose(np.asarray(out), _reference(lhs, rhs, dout, False)[0], **TOL)


def test_bad_arguments_name_what_is_wrong(kernel):
    lhs, rhs, _ = _operands()
    with pytest.raises(ValueError, match="reduction dimension"):
        kernel.ops.ragged_dot(lhs[:, :64], rhs, jnp.asarray(SIZES), implementation="mosaic")
    with pytest.raises(ValueError, match="Unknown implementation"):
        kernel.ops.ragged_dot(lhs, rhs, jnp.asarray(SIZES), implementation="triton")


@pytest.mark.parametrize("implementation", ["mosaic", None])
def test_gradients_with_rhs_transposed(kernel, emulation, implementation):
    """rhs [groups, n, k] (`ragged_dot_general` with rhs contracting on its last axis): a fix over
    upstream 0.0.17, whose VJP returns that gradient as [groups, k, n] (jax.grad then fails)."""
    lhs, rhs, dout = _operands()
    rhs_t = np.ascontiguousarray(rhs.transpose(0, 2, 1))
    dims = jax.lax.RaggedDotDimensionNumbers((([1], [2]), ([], [])), [0], [0])

    def loss(lhs, rhs_t):  # noqa: ANN001, ANN202
        out = kernel.ops.ragged_dot_general(lhs, rhs_t, jnp.asarray(SIZES), dims, precision=jax.lax.Precision.HIGHEST,
                                            implementation=implementation)
        return jnp.sum(out * dout), out

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        (_, out), (dlhs, drhs_t) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(lhs, rhs_t)
    want_out, want_dlhs, want_drhs = _reference(lhs, rhs, dout, False)
    assert drhs_t.shape == rhs_t.shape
    np.testing.assert_allclose(np.asarray(out), want_out, **TOL)
    np.testing.assert_allclose(np.asarray(dlhs), want_dlhs, **TOL)
    np.testing.assert_allclose(np.asarray(drhs_t), want_drhs.transpose(0, 2, 1), **TOL)
