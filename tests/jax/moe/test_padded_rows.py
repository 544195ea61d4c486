"""Rows past sum(group_sizes) come back zero from the grouped matmul, forward and backward, on every path (port.kdl's
fix over upstream, whose gmm leaves them unwritten: NaN in interpret mode), against float64 numpy: the public op on
the Mosaic kernel and on the XLA fallback, the raw kernel `tokamax.ragged_dot.gmm`, and the in-place zeroing itself
(`padded_rows.zeroed`) at ends and row counts its blocks do not divide."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

K, N = 128, 256
# m = 512 rows: 0 padded, a partial row tile (the tile rule takes 512 x ... here: 12 rows of the only tile), whole
# tiles of 128 (256 padded); empty groups in the middle and at the end
ROUTINGS = {"full": [100, 0, 212, 200], "partial-tile": [100, 0, 300, 100, 0], "whole-tiles": [0, 128, 0, 128, 0]}


def _hook(kernel):  # noqa: ANN001, ANN202
    op = importlib.import_module(kernel.ops.tpu.RaggedDot.__module__)
    return importlib.import_module(op.__name__.rsplit(".", 1)[0] + ".tiles_hook")


def _operands(sizes: list[int], m: int = 512):  # noqa: ANN202
    r = np.random.default_rng(len(sizes) + sum(sizes))
    lhs = r.standard_normal((m, K)).astype(np.float32)
    rhs = (r.standard_normal((len(sizes), K, N)) / np.sqrt(K)).astype(np.float32)
    dout = r.standard_normal((m, N)).astype(np.float32)
    return lhs, rhs, np.asarray(sizes, np.int32), dout


def _reference(lhs, rhs, sizes, dout):  # noqa: ANN001, ANN202
    """Forward, dlhs and drhs in float64: rows of no group are zero, empty groups' drhs zero."""
    x, w, g = (np.asarray(a, np.float64) for a in (lhs, rhs, dout))
    out, dx, dw = np.zeros((x.shape[0], w.shape[2])), np.zeros_like(x), np.zeros_like(w)
    start = 0
    for e, size in enumerate(sizes):
        rows = slice(start, start + size)
        out[rows], dx[rows], dw[e] = x[rows] @ w[e], g[rows] @ w[e].T, x[rows].T @ g[rows]
        start += size
    return out, dx, dw


def _check(got, want, k: int) -> None:  # noqa: ANN001
    # float32 operands, float32 accumulation over at most k (or m) products of unit-scale terms: ~1e-5 relative
    for g, w in zip(got, want, strict=True):
        g = np.asarray(g)
        assert not np.isnan(g).any(), "NaN in the result"
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.sqrt(k))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("routing", list(ROUTINGS))
@pytest.mark.parametrize("implementation", ["mosaic", "xla"])
def test_the_public_op_gives_zeros_past_the_groups_forward_and_backward(kernel, emulation, routing, implementation):
    lhs, rhs, sizes, dout = _operands(ROUTINGS[routing])

    def f(x, w):  # noqa: ANN001, ANN202
        return kernel.ops.ragged_dot(x, w, jnp.asarray(sizes), precision=jax.lax.Precision.HIGHEST,
                                     implementation=implementation)

    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        out, vjp = jax.vjp(f, jnp.asarray(lhs), jnp.asarray(rhs))
        dx, dw = vjp(jnp.asarray(dout))
    _check((out, dx, dw), _reference(lhs, rhs, sizes, dout), 512)


@pytest.mark.kernels_ci
def test_the_raw_kernel_zeroes_them_unless_asked_for_upstreams(kernel, emulation):
    lhs, rhs, sizes, _ = _operands(ROUTINGS["partial-tile"])
    hook = _hook(kernel)
    args = (jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(sizes))
    kw = dict(precision=jax.lax.Precision.HIGHEST, out_dtype=jnp.float32, tiling=(128, 128, 128))
    with emulation.interpret_on_cpu("v5e"):
        out = np.asarray(kernel.ragged_dot.gmm(*args, **kw))
        with hook.padded_rows_unwritten():
            released = np.asarray(kernel.ragged_dot.gmm(*args, **kw))
        with hook.upstream_heuristics():
            assert not hook.zero_padded_rows()
    end = int(sizes.sum())
    np.testing.assert_array_equal(out[end:], 0)
    np.testing.assert_array_equal(out[:end], released[:end])
    # as released: the last tile's rows of no group keep the output buffer's old content (another tile's rows here)
    assert not (released[end:] == 0).all(), "upstream's kernel as released left the padded rows unwritten"
    np.testing.assert_allclose(out, _reference(lhs, rhs, sizes, np.zeros((512, N)))[0], rtol=2e-5, atol=1e-4)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("m", "n"), [(7, 3), (40, 3), (64, 3), (96, 128), (1000, 8), (2048, 256), (1152, 4096)])
def test_the_zeroing_covers_every_row_past_the_end_and_no_other(get, emulation, m, n):
    """Every end at the block edges: the ALIGN-row masked piece, whole DMA blocks (2048 rows of 256: blocks of 512;
    of 4096: 256) and the ALIGN-row pieces past them, and rows off the tiles (one masked pass)."""
    padded_rows = get("_src.ops.ragged_dot.padded_rows")
    rows = np.arange(m, dtype=np.float32)[:, None] + np.ones((1, n), np.float32)
    step = jax.jit(padded_rows.zeroed)
    ends = {0, 1, 31, 32, 33, m // 3, m - 512, m - 511, m - 256, m - 33, m - 32, m - 31, 512, 517, 645, m - 1, m}
    for end in sorted(ends & set(range(m + 1))):
        with emulation.interpret_on_cpu("v5e"):
            got = np.asarray(step(jnp.asarray(rows), jnp.int32(end)))
        want = np.where(np.arange(m)[:, None] >= end, 0, rows)
        np.testing.assert_array_equal(got, want, err_msg=f"end {end}")
