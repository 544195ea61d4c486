"""The grouped matmul's weights fetched with lookahead (port.kdl's fix over upstream, `tiles_hook.rhs_lookahead`):
the same numbers as upstream's one-step-ahead fetch, on by default through upstream's public op, off where the
identity checks and the chip benchmark's comparison ask for upstream's kernel."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

DEFAULT = (jax.lax.Precision.DEFAULT, jax.lax.Precision.DEFAULT)


def _modules(kernel):  # noqa: ANN001, ANN202
    op = importlib.import_module(kernel.ops.tpu.RaggedDot.__module__)
    hook = importlib.import_module(op.__name__.rsplit(".", 1)[0] + ".tiles_hook")
    return op, op.backend, hook


def _operands(sizes: list[int], k: int, n: int):  # noqa: ANN202
    rng = np.random.default_rng(7)
    m = sum(sizes)
    lhs = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    rhs = jnp.asarray(rng.standard_normal((len(sizes), k, n)) / np.sqrt(k), jnp.bfloat16)
    return lhs, rhs, jnp.asarray(sizes, jnp.int32)


def _reference(lhs, rhs, sizes, transpose: bool = False) -> np.ndarray:  # noqa: ANN001
    """Each group's rows times its weights in float64."""
    x, w = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    out, start = [], 0
    for g, size in enumerate(np.asarray(sizes)):
        out.append(x[start:start + size] @ (w[g].T if transpose else w[g]))
        start += size
    return np.concatenate(out)


# groups shorter than a row tile, one empty, one over several tiles, a boundary inside a tile
SIZES = [40, 0, 200, 16, 0, 128, 128, 0]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("transpose", [False, True], ids=["gmm", "dlhs"])
def test_lookahead_gives_upstreams_numbers(kernel, emulation, transpose):
    _, backend, _ = _modules(kernel)
    k, n = 256, 384
    lhs, rhs, sizes = _operands(SIZES, k, n)
    if transpose:
        rhs = jnp.swapaxes(rhs, 1, 2)
    outs = {}
    with emulation.interpret_on_cpu("v5e"):
        for ahead in (False, True):
            outs[ahead] = np.asarray(backend.gmm(lhs, rhs, sizes, DEFAULT, jnp.float32, tiling=(128, 128, 128),
                                                 transpose_rhs=transpose, rhs_lookahead=ahead))
    np.testing.assert_array_equal(outs[True], outs[False])
    # float32 sums of k bf16 products of unit-scale operands: rounding ~ sqrt(k) * 2^-24 relative, 1e-5 is ample
    np.testing.assert_allclose(outs[True], _reference(lhs, rhs, sizes, transpose), rtol=1e-5, atol=1e-5)


@pytest.mark.kernels_ci
def test_the_public_op_fetches_with_lookahead_unless_asked_for_upstreams_kernel(kernel, emulation, monkeypatch):
    op, backend, hook = _modules(kernel)
    asked: list[bool] = []
    real = backend.gmm

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(kwargs["rhs_lookahead"])
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "gmm", spy)
    lhs, rhs, sizes = _operands(SIZES, 256, 384)

    def loss(x, w):  # noqa: ANN001, ANN202
        return kernel.ops.ragged_dot(x, w, sizes, implementation="mosaic").astype(jnp.float32).sum()

    # upstream's backward builds Ops that check the device: on a CPU host they run under its cross-compile option
    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        jax.grad(loss, (0, 1))(lhs, rhs)  # gmm forward and the backward's dlhs
        assert asked == [True, True], asked
        for around in (hook.upstream_heuristics, hook.weights_one_step_ahead):
            asked.clear()
            with around():
                jax.grad(loss, (0, 1))(lhs, rhs)
            assert asked == [False, False], (around.__name__, asked)
    assert hook.rhs_lookahead() and hook.rhs_lookahead(1152, 2880)  # gpt-oss-20b's tuned gmm: lanes aligned
    assert not hook.rhs_lookahead(1440, 1024)  # the weights' columns off the lanes: Mosaic refuses the fetch
    assert not hook.rhs_lookahead(1024, 1000)  # their rows off a 16-bit sublane tile
