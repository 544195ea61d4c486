"""No rows (no tokens, no queries) give empty results where that has a meaning, with gradients of the right shapes:
the LM head's loss and statistics, distillation's divergence and loss, splash attention. The reference is the obvious
one: a sum over no rows is 0, a per-row result has no entries, and nothing reaches the gradients (zeros)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.kernels_ci

HIDDEN, VOCAB = 128, 256


def _head(rows: int = 0) -> tuple:
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.standard_normal((rows, HIDDEN)), jnp.float32),
            jnp.asarray(rng.standard_normal((VOCAB, HIDDEN)), jnp.float32), jnp.zeros((rows,), jnp.int32),
            jnp.ones((rows,), jnp.float32))


def _zeros_like(*arrays: jax.Array) -> list[np.ndarray]:
    return [np.zeros(a.shape, a.dtype) for a in arrays]


@pytest.mark.parametrize("chunk", ["auto", None, 128], ids=["auto", "kernels", "chunked"])
def test_the_lm_head_loss_of_no_rows_is_zero(kernel, emulation, chunk):
    x, w, t, m = _head()
    b = jnp.ones((VOCAB,), jnp.float32)
    with emulation.interpret_on_cpu("v6e"):
        loss, grads = jax.value_and_grad(lambda x, w, b: kernel.lm_head.loss.loss(x, w, t, m, b=b, chunk=chunk),
                                         argnums=(0, 1, 2))(x, w, b)
    assert float(loss) == 0.0
    for g, want in zip(grads, _zeros_like(x, w, b), strict=True):
        np.testing.assert_array_equal(np.asarray(g), want)


def test_the_lm_head_statistics_of_no_rows_are_empty(kernel, emulation):
    x, w, t, _ = _head()
    with emulation.interpret_on_cpu("v6e"):
        stats = kernel.lm_head.statistics(x, w, None, t)
        dx, dw = jax.grad(lambda x, w: kernel.lm_head.statistics(x, w, None, t).lse.sum(), argnums=(0, 1))(x, w)
    assert all(s.shape == (0,) and s.dtype == jnp.float32 for s in stats)
    np.testing.assert_array_equal(np.asarray(dx), np.zeros((0, HIDDEN), np.float32))
    np.testing.assert_array_equal(np.asarray(dw), np.zeros((VOCAB, HIDDEN), np.float32))


@pytest.mark.parametrize("scheme", ["auto", "kernels", "stored"])
def test_the_divergence_of_no_rows_is_empty(kernel, emulation, scheme):
    """Before: "Out of bound slice" from inside the kernels' call (issue 70)."""
    x, w, _, _ = _head()
    b = jnp.zeros((VOCAB,), jnp.float32)

    def total(x, w, b):  # noqa: ANN001, ANN202
        div, entropy = kernel.distill.divergence(x, w, b, x, w, None, beta=0.5, scheme=scheme)
        return div.sum() + entropy.sum()

    with emulation.interpret_on_cpu("v6e"):
        div, entropy = kernel.distill.divergence(x, w, b, x, w, None, beta=0.5, scheme=scheme)
        value, grads = jax.value_and_grad(total, argnums=(0, 1, 2))(x, w, b)
    assert div.shape == entropy.shape == (0,) and div.dtype == entropy.dtype == jnp.float32
    assert float(value) == 0.0
    for g, want in zip(grads, _zeros_like(x, w, b), strict=True):
        np.testing.assert_array_equal(np.asarray(g), want)


@pytest.mark.parametrize("chunk", ["auto", None, 128], ids=["auto", "per-token", "fused"])
def test_the_distillation_loss_of_no_rows_is_zero(kernel, emulation, chunk):
    x, w, _, m = _head()
    with emulation.interpret_on_cpu("v6e"):
        loss, div, entropy = kernel.distill.loss(x, w, None, x, w, None, m, beta=0.0, chunk=chunk)
        dx, dw = jax.grad(lambda x, w: kernel.distill.loss(x, w, None, x, w, None, m, beta=0.0, chunk=chunk)[0],
                          argnums=(0, 1))(x, w)
    assert float(loss) == 0.0 and div.shape == entropy.shape == (0,)
    np.testing.assert_array_equal(np.asarray(dx), np.zeros((0, HIDDEN), np.float32))
    np.testing.assert_array_equal(np.asarray(dw), np.zeros((VOCAB, HIDDEN), np.float32))


@pytest.mark.parametrize("shape", [(0, 2, 128), (1, 2, 0)], ids=["no batch", "no queries"])
def test_splash_of_no_queries_is_empty(kernel, emulation, shape):
    batch, heads, q_len = shape
    q = jnp.ones((batch, heads, q_len, 64), jnp.bfloat16)
    k = jnp.ones((batch, heads, 128, 64), jnp.bfloat16)
    v = jnp.ones((batch, heads, 128, 32), jnp.bfloat16)
    spec = kernel.splash.MaskSpec.of(True, None)
    with emulation.interpret_on_cpu("v6e"):
        out, max_logits, lse = kernel.splash.attend(q, k, v, None, None, None, spec=spec)
        dq, dk, dv = jax.grad(lambda q, k, v: kernel.splash.attend(q, k, v, None, None, None, spec=spec)[0]
                              .astype(jnp.float32).sum(), argnums=(0, 1, 2))(q, k, v)
    assert out.shape == (batch, heads, q_len, 32) and out.dtype == jnp.bfloat16
    assert max_logits.shape == lse.shape == (batch, heads, q_len)
    for g, a in ((dq, q), (dk, k), (dv, v)):
        assert g.shape == a.shape and not np.asarray(g, np.float32).any()
