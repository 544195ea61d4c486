"""Interpret-mode numerics of the public Kimi delta attention (Mosaic), values, final state and gradients, on CPU.

The reference is the delta rule written out token by token here (a `lax.scan` in f32 at HIGHEST precision), with
the gate activation and the q/k L2 normalisation applied as upstream's docstring defines them; its gradients come
from `jax.vjp` of that recurrence, so they share nothing with the kernels' chunked backward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

H, B, T, K, V = 2, 1, 128, 128, 128
HI = jax.lax.Precision.HIGHEST
LOWER = -5.0


def _operands() -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(17)
    q, k = (r.standard_normal((H, B, T, K)).astype(np.float32) for _ in range(2))
    v = r.standard_normal((H, B, T, V)).astype(np.float32)
    g = r.standard_normal((H, B, T, K)).astype(np.float32)
    beta = (1.0 / (1.0 + np.exp(-r.standard_normal((H, B, T))))).astype(np.float32)
    a_log = (0.1 * r.standard_normal(H)).astype(np.float32)
    bias = (0.1 * r.standard_normal(H * K)).astype(np.float32)
    dout = r.standard_normal((H, B, T, V)).astype(np.float32)
    return q, k, v, g, beta, a_log, bias, dout


def _reference(q, k, v, g, beta, a_log, bias, fused_gate: bool):  # noqa: ANN001, ANN202
    """(out [H, B, T, V], final state [B, 1, H, K, V]); q/k L2-normalised, scale K**-0.5."""
    q, k = (x * jax.lax.rsqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6) for x in (q, k))
    if fused_gate:  # lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), per head and key channel
        g = LOWER * jax.nn.sigmoid(jnp.exp(a_log)[:, None, None, None] * (g + bias.reshape(H, 1, 1, K)))

    def step(state, x):  # noqa: ANN001, ANN202
        qt, kt, vt, gt, bt = x
        state = state * jnp.exp(gt)[..., None]
        pred = jnp.einsum("hbk,hbkv->hbv", kt, state, precision=HI)
        state = state + (bt[..., None] * kt)[..., None] * (vt - pred)[..., None, :]
        return state, K**-0.5 * jnp.einsum("hbk,hbkv->hbv", qt, state, precision=HI)

    xs = tuple(jnp.moveaxis(a, 2, 0) for a in (q, k, v, g, beta))
    final, out = jax.lax.scan(step, jnp.zeros((H, B, K, V), jnp.float32), xs)
    return jnp.moveaxis(out, 0, 2), jnp.transpose(final, (1, 0, 2, 3))[:, None]


# f32 throughout (exact f32 matmuls on CPU); the chunked WY form, its triangular solves and the chunked backward
# differ from the token recurrence and its autodiff in rounding only (values and gradients O(0.1-10)).
TOL = dict(rtol=1e-3, atol=1e-4)


# The log-space gate alone is checked at kernel level (tests/jax/cases/kda.py); here the public path adds the
# gate activation, L2 normalisation and the VJP Op. One case keeps the added test time small.
@pytest.mark.parametrize("fused_gate", [True], ids=["fused_gate_lower_bound"])
def test_values_state_and_gradients(kernel, emulation, fused_gate):
    q, k, v, g, beta, a_log, bias, dout = _operands()
    if not fused_gate:  # log-space gates, given as they are: negative and small (decays in (0.6, 1])
        g = (-0.1 * np.abs(g)).astype(np.float32)
    kw = dict(use_gate_in_kernel=True, lower_bound=LOWER, a_log=a_log, delta_time_bias=bias) if fused_gate else {}

    def loss(q, k, v, g, beta):  # noqa: ANN001, ANN202
        out, state = kernel.ops.kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm=True, output_final_state=True,
                                                     implementation="mosaic", **kw)
        return jnp.sum(out * dout), (out, state)

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        (_, (out, state)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))(
            q, k, v, g, beta)

    def ref_loss(q, k, v, g, beta):  # noqa: ANN001, ANN202
        out, state = _reference(q, k, v, g, beta, a_log, bias, fused_gate)
        return jnp.sum(out * dout), (out, state)

    (_, (want_out, want_state)), want_grads = jax.value_and_grad(ref_loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(
        q, k, v, g, beta)
    for name, got, want in zip(("out", "state", "dq", "dk", "dv", "dg", "dbeta"), (out, state, *grads),
                               (want_out, want_state, *want_grads), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), err_msg=name, **TOL)
