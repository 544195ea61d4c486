"""mHC (DeepSeek-V4 manifold-constrained hyper-connections): pre, post and the fused post+pre seam kernel.

The kernels take `(T, M, H)` residual streams and `(T, M, 1)` post gates; the pure-JAX reference takes
them flat, `(T, M * H)` and `(T, M)`, so the reference wrappers reshape. Upstream runs them on TPU v5e and
newer (`generation >= 5`), so every chip here.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, rng

PRE = "_src.ops.mhc.pre_kernel"
POST = "_src.ops.mhc.post_kernel"
FUSED = "_src.ops.mhc.fused_post_pre_kernel"
REF = "_src.ops.mhc.reference"
CHIPS = ("v5e", "v6e", "v7x")

# DeepSeek-V4 gate constants, in argument order: rms_eps, hc_pre_eps, hc_sinkhorn_eps,
# hc_post_mult_value, sinkhorn_repeat.
GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)

# f32 gate outputs: the kernels do the f32 mix GEMM as three exact bf16 passes (fn split in
# hi/mid/lo chunks), the reference at Precision.HIGHEST; only the summation order of the
# (M * H)-long f32 sums differs, and 20 Sinkhorn rounds are well conditioned.
F32_TOL = (1e-4, 1e-5)
# bf16 outputs (new residual, layer input): values are O(1), so 1-2 bf16 ulp (2^-8 relative each).
BF16_TOL = (2e-2, 2e-2)
# The fused seam feeds its bf16 recombined streams to the mix GEMM. On TPU a stream value can round to
# the adjacent bf16 value in kernel vs reference (upstream then allows 5e-3 on the gates); in interpret
# mode on these inputs the recombined streams are bit-identical, so the gates keep F32_TOL.


def _assert_close(got, want, tol: tuple[float, float], what: str) -> None:  # noqa: ANN001
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol[0], atol=tol[1], err_msg=what)


def _compare(tols: tuple[tuple[float, float], ...], names: tuple[str, ...]):  # noqa: ANN202
    def compare(out, expected) -> None:  # noqa: ANN001
        for o, e, tol, name in zip(out, expected, tols, names, strict=True):
            _assert_close(o, e, tol, name)

    return compare


def _gate_params(r: np.random.Generator, m: int, h: int) -> tuple[np.ndarray, ...]:
    """`(fn, hc_scale, hc_base)`: the next sublayer's f32 gate projection, logit scales and biases."""
    m3 = m * (m + 2)
    fn = (r.standard_normal((m3, m * h), np.float32) * 0.02).astype(np.float32)
    hc_scale = (1.0 + 0.1 * r.standard_normal(3)).astype(np.float32)
    hc_base = (0.5 * r.standard_normal(m3)).astype(np.float32)
    return fn, hc_scale, hc_base


def _post_args(r: np.random.Generator, t: int, m: int, h: int) -> tuple[np.ndarray, ...]:
    """`(x, residual, post_layer_mix, comb_res_mix)` shaped like `mhc_pre` outputs feed `mhc_post`."""
    x = r.standard_normal((t, h), np.float32).astype(jnp.bfloat16)
    residual = r.standard_normal((t, m, h), np.float32).astype(jnp.bfloat16)
    post = (2.0 / (1.0 + np.exp(-r.standard_normal((t, m, 1))))).astype(np.float32)
    comb = np.abs(r.standard_normal((t, m, m))) + 0.01
    return x, residual, post, (comb / comb.sum(axis=-1, keepdims=True)).astype(np.float32)


def _pre_inputs(t: int, m: int, h: int) -> tuple[np.ndarray, ...]:
    r = rng(100 + t + m + h)
    residual = r.standard_normal((t, m, h), np.float32).astype(jnp.bfloat16)
    return (residual, *_gate_params(r, m, h))


def _post_inputs(t: int, m: int, h: int) -> tuple[np.ndarray, ...]:
    return _post_args(rng(200 + t + m + h), t, m, h)


def _fused_inputs(t: int, m: int, h: int) -> tuple[np.ndarray, ...]:
    r = rng(300 + t + m + h)
    return (*_post_args(r, t, m, h), *_gate_params(r, m, h))


def _pre_reference(get):  # noqa: ANN001, ANN202
    def f(residual, fn, hc_scale, hc_base):  # noqa: ANN001, ANN202
        t, m, h = residual.shape
        post, comb, layer = get(REF).mhc_pre(residual.reshape(t, m * h), fn, hc_scale, hc_base, *GATES)
        return post.reshape(t, m, 1), comb, layer

    return f


def _post_reference(get):  # noqa: ANN001, ANN202
    def f(x, residual, post, comb):  # noqa: ANN001, ANN202
        t, m, h = residual.shape
        return get(REF).mhc_post(x, residual.reshape(t, m * h), post.reshape(t, m), comb).reshape(t, m, h)

    return f


def _fused_reference(get):  # noqa: ANN001, ANN202
    def f(x, residual, post, comb, fn, hc_scale, hc_base):  # noqa: ANN001, ANN202
        t, m, h = residual.shape
        new_res, post_cur, comb_cur, layer = get(REF).mhc_fused_post_pre(
            x, residual.reshape(t, m * h), post.reshape(t, m), comb, fn, hc_scale, hc_base, *GATES)
        return new_res.reshape(t, m, h), post_cur.reshape(t, m, 1), comb_cur, layer

    return f


CASES = [
    Case(
        id="mhc/pre-T40-M4-H256-tb16",
        call=lambda get: lambda residual, fn, hc_scale, hc_base: get(PRE).mhc_pre(
            residual, fn, hc_scale, hc_base, *GATES, token_block_size=16),
        inputs=lambda: _pre_inputs(40, 4, 256),
        reference=_pre_reference,
        tolerance=F32_TOL,
        tolerance_why="post/comb gates f32 (exact 3-pass bf16 GEMM vs HIGHEST: summation order only, "
                      "per upstream's 1e-4/1e-5); layer input bf16 O(1) at 1-2 ulp (2e-2); see compare",
        compare=_compare((F32_TOL, F32_TOL, BF16_TOL), ("post_mix", "comb_mix", "layer_input")),
        chips=CHIPS,
    ),
    Case(
        id="mhc/post-T40-M4-H256-tb16",
        call=lambda get: functools.partial(get(POST).mhc_post, token_block_size=16),
        inputs=lambda: _post_inputs(40, 4, 256),
        reference=_post_reference,
        tolerance=BF16_TOL,
        tolerance_why="bf16 new residual of O(1) values from f32 mixing: 1-2 bf16 ulp (2^-8 relative each)",
        chips=CHIPS,
    ),
    Case(
        id="mhc/fused_post_pre-T40-M2-H256-tb16",
        call=lambda get: lambda x, residual, post, comb, fn, hc_scale, hc_base: get(FUSED).mhc_fused_post_pre(
            x, residual, post, comb, fn, hc_scale, hc_base, *GATES, token_block_size=16),
        inputs=lambda: _fused_inputs(40, 2, 256),
        reference=_fused_reference,
        tolerance=F32_TOL,
        tolerance_why="bf16 residual/layer input at 1-2 ulp (2e-2); f32 gates at summation-order tolerance "
                      "(the bf16 recombined streams feeding the GEMM match bit for bit on CPU); see compare",
        compare=_compare((BF16_TOL, F32_TOL, F32_TOL, BF16_TOL),
                         ("new_residual", "post_mix", "comb_mix", "layer_input")),
        chips=CHIPS,
    ),
]
