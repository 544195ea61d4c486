"""Interpret-mode numerics of the public fused FP8 matmul (`ops.experimental.tpu.FusedFp8Matmul`), forward
and through `jax.grad`, on CPU as TPU7x (the only chip with an FP8 MXU).

The references are upstream's XLA references beside the Op (`fused_fp8_matmul/base.py`:
`fused_fp8_matmul_reference`, `fused_fp8_matmul_vjp_reference`), reached through the kernel; the public
call must run the Pallas kernels (checked in its jaxpr).
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.cases import on_tensorcores  # the kernels read the core count from a mesh: one core while traced

M, K, N = 256, 256, 512
FP8_MAX = 448.0
# Same FP8 quantization on both sides and exact FP8 products; the differences are the bf16 rounding of the
# row scale (2^-8 relative), f32 summation order over k = 256 and the final bf16 rounding (2^-8 relative).
TOL = dict(rtol=1e-2, atol=1e-2)


def _base(kernel):  # noqa: ANN001, ANN202
    return importlib.import_module(f"{kernel.__name__}._ported._src.ops.experimental.fused_fp8_matmul.base")


def _operands() -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(17)
    x = r.standard_normal((M, K), np.float32).astype(jnp.bfloat16)
    w = r.standard_normal((K, N), np.float32) * 0.02
    scale = (np.abs(w).max(axis=0) / FP8_MAX).astype(np.float32)
    dout = r.standard_normal((M, N), np.float32).astype(jnp.bfloat16)
    return x, w.astype(jnp.bfloat16), (w / scale).astype(jnp.float8_e4m3fn), scale, dout


@pytest.mark.parametrize("weight", ["plain", "qarray"])
def test_values_and_lhs_gradient(kernel, emulation, weight):
    x, w, wq, scale, dout = _operands()
    base = _base(kernel)
    rhs = w if weight == "plain" else base.QArray(qvalue=jnp.asarray(wq), scale=jnp.asarray(scale)[None, :])

    def loss(lhs):  # noqa: ANN001, ANN202
        out = kernel.ops.experimental.tpu.FusedFp8Matmul()(lhs, rhs)
        return jnp.sum(out.astype(jnp.float32) * dout.astype(jnp.float32)), out

    fn = on_tensorcores(jax.value_and_grad(loss, has_aux=True))
    with emulation.interpret_on_cpu("v7x"), kernel.ops.config.cross_compile(True):
        # Both kernels run as `pl.kernel` over a TensorCore mesh: a `mpmd_map` each (forward, dLHS).
        assert str(jax.make_jaxpr(fn)(x)).count("mpmd_map[") >= 2, "the public call did not run both kernels"
        (_, out), dlhs = jax.jit(fn)(x)
    want, residuals = base.fused_fp8_matmul_reference(x, rhs)
    want_dlhs, _ = base.fused_fp8_matmul_vjp_reference(residuals, dout)
    assert out.dtype == want.dtype and dlhs.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want, np.float32), **TOL)
    np.testing.assert_allclose(np.asarray(dlhs, np.float32), np.asarray(want_dlhs, np.float32), **TOL)
