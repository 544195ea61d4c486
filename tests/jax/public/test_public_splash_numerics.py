"""Interpret-mode numerics of the public splash attention, values and gradients, on CPU.

The reference is a float64 softmax attention written here in numpy, with the masks (causal,
a sliding window), the soft cap and the segment ids built in the test; gradients by hand.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.public.attention_reference import attention

HEADS, KV_HEADS, LEN, DIM = 2, 1, 256, 128
SPLASH = "_src.ops.experimental.tpu.splash_attention"


def _operands() -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(11)
    q = r.standard_normal((HEADS, LEN, DIM)).astype(np.float32)
    k = r.standard_normal((KV_HEADS, LEN, DIM)).astype(np.float32)
    v = r.standard_normal((KV_HEADS, LEN, DIM)).astype(np.float32)
    return q, k, v, r.standard_normal((HEADS, LEN, DIM)).astype(np.float32)


def _allowed(kind: str) -> np.ndarray:
    rows, cols = np.arange(LEN)[:, None], np.arange(LEN)[None, :]
    if kind == "causal":
        return cols <= rows
    if kind == "window":
        return (cols <= rows) & (cols > rows - 64)
    if kind == "segments":  # causal within two documents of 100 and 156 tokens
        doc = (np.arange(LEN) >= 100).astype(np.int32)
        return (cols <= rows) & (doc[:, None] == doc[None, :])
    return np.ones((LEN, LEN), bool)


# f32 in and out, f32 softmax statistics on the kernel side; 256 keys per row: the differences
# from float64 are summation order and exp/tanh rounding, ~1e-5 relative.
TOL = dict(rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize(("kind", "cap"), [("causal", None), ("window", None), ("full", 20.0), ("segments", None)])
def test_values_and_gradients(kernel, emulation, kind, cap):
    q, k, v, dout = _operands()
    base = __import__(f"{kernel.__name__}._ported.{SPLASH}.base", fromlist=["Mask"])
    if kind == "causal":
        mask, segments = base.CAUSAL_MASK, None
    elif kind == "segments":
        doc = jnp.asarray((np.arange(LEN) >= 100).astype(np.int32))
        mask, segments = base.CAUSAL_MASK, base.SegmentIds(doc, doc)
    else:
        mask, segments = jnp.asarray(_allowed(kind)), None

    def loss(q, k, v):  # noqa: ANN001, ANN202
        out = kernel.ops.experimental.splash_attention(q, k, v, mask, segments, attn_logits_soft_cap=cap,
                                                       implementation="mosaic_tpu")
        return jnp.sum(out * dout), out

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    want = attention(q, k, v, dout, _allowed(kind), cap)
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *grads), want, strict=True):
        np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, **TOL)
