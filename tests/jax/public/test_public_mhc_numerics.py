"""Interpret-mode numerics of the public mHC ops (`ops.mhc_pre`, `ops.mhc_post`, `ops.mhc_fused_post_pre`),
in upstream's flat layout, on CPU as v5e (the oldest chip upstream runs them on).

The reference is upstream's pure-JAX `mhc/reference.py`, reached through the kernel; each public call
must run the Pallas kernel (checked in its jaxpr), not the XLA Op.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np

T, M, H = 24, 4, 256
GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)  # DeepSeek-V4's eps, post multiplier and Sinkhorn iterations
# Gates (f32): the kernel's exact 3-pass bf16 GEMM vs the reference's HIGHEST f32 dot differ by summation
# order only (upstream's 1e-4 / 1e-5). bf16 streams of O(1) values: 1-2 bf16 ulps (2^-8 relative each).
F32_TOL = dict(rtol=1e-4, atol=1e-5)
BF16_TOL = dict(rtol=2e-2, atol=2e-2)


def _inputs(m: int) -> dict[str, np.ndarray]:
    r = np.random.default_rng(5 + m)
    m3 = m * (m + 2)
    comb = np.abs(r.standard_normal((T, m, m))) + 0.01
    return dict(
        x=r.standard_normal((T, H), np.float32).astype(jnp.bfloat16),
        residual=r.standard_normal((T, m * H), np.float32).astype(jnp.bfloat16),
        post=(2.0 / (1.0 + np.exp(-r.standard_normal((T, m))))).astype(np.float32),
        comb=(comb / comb.sum(axis=-1, keepdims=True)).astype(np.float32),
        fn=(r.standard_normal((m3, m * H), np.float32) * 0.02).astype(np.float32),
        hc_scale=(1.0 + 0.1 * r.standard_normal(3)).astype(np.float32),
        hc_base=(0.5 * r.standard_normal(m3)).astype(np.float32),
    )


def _run(kernel, emulation, fn, *args):  # noqa: ANN001, ANN002, ANN202
    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        assert "pallas_call" in str(jax.make_jaxpr(fn)(*args)), "the public call did not run the kernel"
        return jax.jit(fn)(*args)


def _check(got, want, tols, names) -> None:  # noqa: ANN001
    for g, w, tol, name in zip(got, want, tols, names, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), err_msg=name, **tol)


def _reference(kernel):  # noqa: ANN001, ANN202
    return importlib.import_module(f"{kernel.__name__}._ported._src.ops.mhc.reference")


def test_pre(kernel, emulation):
    a = _inputs(M)
    args = (a["residual"], a["fn"], a["hc_scale"], a["hc_base"])
    got = _run(kernel, emulation, lambda *x: kernel.ops.mhc_pre(*x, *GATES, implementation="mosaic_tpu"), *args)
    want = _reference(kernel).mhc_pre(*args, *GATES)
    _check(got, want, (F32_TOL, F32_TOL, BF16_TOL), ("post_mix", "comb_mix", "layer_input"))


def test_post(kernel, emulation):
    a = _inputs(M)
    args = (a["x"], a["residual"], a["post"], a["comb"])
    got = _run(kernel, emulation, lambda *x: kernel.ops.mhc_post(*x, implementation="mosaic_tpu"), *args)
    _check((got,), (_reference(kernel).mhc_post(*args),), (BF16_TOL,), ("new_residual",))


def test_fused_post_pre(kernel, emulation):
    a = _inputs(2)
    args = (a["x"], a["residual"], a["post"], a["comb"], a["fn"], a["hc_scale"], a["hc_base"])
    got = _run(kernel, emulation,
               lambda *x: kernel.ops.mhc_fused_post_pre(*x, *GATES, implementation="mosaic_tpu"), *args)
    want = _reference(kernel).mhc_fused_post_pre(*args, *GATES)
    _check(got, want, (BF16_TOL, F32_TOL, F32_TOL, BF16_TOL), ("new_residual", "post_mix", "comb_mix", "layer_input"))
