"""Kimi delta attention (`chunk_kda_fwd_custom`, `chunk_kda_bwd_custom`): the chunked kernels on canonical inputs.

The kernels take head-first `[H, B, T, D]` inputs that upstream's Op has already canonicalised: here sequences
of a whole number of 64-token chunks, L2-normalised q and k, and log-space gates (no fused gate activation), the
simplest form the Op hands them. Upstream's Op runs them on TPU v6e and newer (`generation >= 6`), so v6e and v7x.

The reference is the delta rule written out token by token in this file (a `lax.scan`, f32 at HIGHEST):
S <- S * exp(g_t); S <- S + beta_t k_t (v_t - k_t S); o_t = scale q_t S; its gradients come from `jax.vjp`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.kda.pallas_mosaic_tpu_kernel"
CHIPS = ("v6e", "v7x")
H, B, T, K, V = 2, 1, 128, 128, 128  # two 64-token chunks: the state crosses a chunk boundary
SCALE = K**-0.5
HI = jax.lax.Precision.HIGHEST


def _inputs() -> tuple[np.ndarray, ...]:
    r = rng(H + B + T + K)
    q = r.standard_normal((H, B, T, K), np.float32)
    k = r.standard_normal((H, B, T, K), np.float32)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = r.standard_normal((H, B, T, V), np.float32)
    g = (-0.1 * np.abs(r.standard_normal((H, B, T, K)))).astype(np.float32)  # decays in (0.6, 1]
    beta = (1.0 / (1.0 + np.exp(-r.standard_normal((H, B, T))))).astype(np.float32)
    return q, k, v, g, beta


def _bwd_inputs() -> tuple[np.ndarray, ...]:
    do = rng(7).standard_normal((H, B, T, V), np.float32)
    return (*_inputs(), do)


def _delta_rule(q, k, v, g, beta):  # noqa: ANN001, ANN202
    """(out [H, B, T, V], final state [B, H, K, V]) of the gated delta rule, token by token."""

    def step(state, x):  # noqa: ANN001, ANN202
        qt, kt, vt, gt, bt = x  # [H, B, ...] at one time step
        state = state * jnp.exp(gt)[..., None]
        pred = jnp.einsum("hbk,hbkv->hbv", kt, state, precision=HI)
        state = state + (bt[..., None] * kt)[..., None] * (vt - pred)[..., None, :]
        return state, SCALE * jnp.einsum("hbk,hbkv->hbv", qt, state, precision=HI)

    xs = tuple(jnp.moveaxis(jnp.asarray(a, jnp.float32), 2, 0) for a in (q, k, v, g, beta))
    final, out = jax.lax.scan(step, jnp.zeros((H, B, K, V), jnp.float32), xs)
    return jnp.moveaxis(out, 0, 2), jnp.transpose(final, (1, 0, 2, 3))


def _fwd_call(get):  # noqa: ANN001, ANN202
    def f(q, k, v, g, beta):  # noqa: ANN001, ANN202
        out, _ = get(KERNEL).chunk_kda_fwd_custom(q, k, v, g, beta, scale=SCALE, output_final_state=True,
                                                  chunk_size=64)
        return out

    return f


def _fwd_bwd_call(get):  # noqa: ANN001, ANN202
    """Forward keeping its residuals (hidden states saved, as upstream's default config), then the backward."""

    def f(q, k, v, g, beta, do):  # noqa: ANN001, ANN202
        kernel = get(KERNEL)
        _, residuals = kernel.chunk_kda_fwd_custom(q, k, v, g, beta, scale=SCALE, chunk_size=64,
                                                   disable_recompute=True, return_residuals=True)
        dq, dk, dv, dg, dbeta, *_ = kernel.chunk_kda_bwd_custom(
            SCALE, False, False, None, True, None, 64, None, False, residuals, (do, None))
        return dq, dk, dv, dg, dbeta

    return f


def _fwd_bwd_reference(get):  # noqa: ANN001, ANN202
    del get

    def f(q, k, v, g, beta, do):  # noqa: ANN001, ANN202
        _, vjp = jax.vjp(lambda *a: _delta_rule(*a)[0], q, k, v, g, beta)
        return vjp(jnp.asarray(do))

    return f


CASES = [
    Case(
        id=f"kda/fwd-f32-H{H}-T{T}-K{K}-final_state",
        call=_fwd_call,
        inputs=_inputs,
        reference=lambda get: _delta_rule,
        tolerance=(1e-4, 1e-5),
        tolerance_why="f32 throughout (exact f32 matmuls on CPU); the chunked form (WY representation, triangular "
                      "solve, cumulative gates) against a token-by-token recurrence differs in rounding only",
        chips=CHIPS,
    ),
    Case(
        id=f"kda/fwd_bwd-f32-H{H}-T{T}-K{K}",
        call=_fwd_bwd_call,
        inputs=_bwd_inputs,
        reference=_fwd_bwd_reference,
        tolerance=(1e-3, 1e-4),
        tolerance_why="f32 gradients of the chunked backward (recomputed intra-chunk matrices, reverse cumulative "
                      "gate sums) against autodiff of the token recurrence: rounding only, values O(0.1-1)",
        chips=CHIPS,
    ),
]
