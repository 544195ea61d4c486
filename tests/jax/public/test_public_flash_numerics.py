"""Interpret-mode numerics of the public flash attention (`ops.dot_product_attention` with
`implementation="mosaic"`), values and gradients, on CPU, against the float64 numpy attention
of `attention_reference.py`; masks built here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.public.attention_reference import attention

HEADS, KV_HEADS, LEN, DIM = 2, 1, 256, 128
SCALE = 0.125


def _operands() -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(13)
    q = r.standard_normal((1, LEN, HEADS, DIM)).astype(np.float32)
    k = r.standard_normal((1, LEN, KV_HEADS, DIM)).astype(np.float32)
    v = r.standard_normal((1, LEN, KV_HEADS, DIM)).astype(np.float32)
    return q, k, v, r.standard_normal((1, LEN, HEADS, DIM)).astype(np.float32)


def _heads_first(x: np.ndarray) -> np.ndarray:  # [1, T, N, H] -> [N, T, H]
    return np.transpose(x[0], (1, 0, 2))


# f32 throughout; the kernel keeps f32 softmax statistics; 256 keys per row: summation order and
# exp rounding only, ~1e-5 relative.
TOL = dict(rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_values_and_gradients(kernel, emulation, causal):
    q, k, v, dout = _operands()

    def loss(q, k, v):  # noqa: ANN001, ANN202
        out = kernel.ops.dot_product_attention(q, k, v, scale=SCALE, is_causal=causal, implementation="mosaic",
                                               precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(out * dout), out

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    rows, cols = np.arange(LEN)[:, None], np.arange(LEN)[None, :]
    allowed = cols <= rows if causal else np.ones((LEN, LEN), bool)
    out_ref, dq, dk, dv = attention(_heads_first(q) * SCALE, _heads_first(k), _heads_first(v), _heads_first(dout),
                                    allowed, None)
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *grads), (out_ref, dq * SCALE, dk, dv),
                                   strict=True):
        np.testing.assert_allclose(_heads_first(np.asarray(got)), expected, err_msg=name, **TOL)
