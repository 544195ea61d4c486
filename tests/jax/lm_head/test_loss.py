"""`tokamax.lm_head.loss`: the labels path under `jax.grad` against float64 from the definitions (`test_fused`'s
reference): the loss and dx, dW, db through a cotangent other than 1 (a mean over a batch's kept tokens, scaled),
a frozen head (the weight not differentiated: dW not made), no gradient to the weights or targets, a bias of the
wrong shape refused by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .numerics import U
from .reference import operands
from .test_fused import _reference


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chunk", [128, None], ids=["chunked", "kernels"])
def test_the_loss_under_grad_matches_float64(kernel, emulation, chunk):
    lm_head = kernel.lm_head
    rows, hidden, vocab = 200, 128, 520  # the chunked scheme's rows left past a chunk; a vocabulary off the lanes
    x, w, b, targets = operands(rows, hidden, vocab, seed=11)
    m = (np.random.default_rng(12).random(rows) > 0.3).astype(np.float32)
    m /= m.sum()  # transformers' mean over the kept tokens
    scale = 3.0  # the step's loss is 3 x this one: the backward scales the forward's gradients

    def step(x, w, b):  # noqa: ANN001, ANN202
        return scale * lm_head.loss.loss(x, w, jnp.asarray(targets), jnp.asarray(m), b=b, chunk=chunk)

    with emulation.interpret_on_cpu("v6e"):
        value, (dx, dw, db) = jax.jit(jax.value_and_grad(step, argnums=(0, 1, 2)))(x, w, b)
    want, want_dx, want_dw, want_db, g_abs, terms = _reference(x, w, b, targets, m, lm_head.IDENTITY, 0.0, 0.0)
    assert abs(float(value) - scale * want) <= scale * (np.sqrt(vocab) + np.sqrt(rows) + 8) * U * terms
    for name, got, expected, bound_of, n in (
            ("dx", dx, want_dx, g_abs @ np.abs(np.asarray(w, np.float64)), vocab),
            ("dw", dw, want_dw, g_abs.T @ np.abs(np.asarray(x, np.float64)), rows),
            ("db", db, want_db, g_abs.sum(0), rows)):
        got = np.asarray(got, np.float64)
        bound = scale * ((np.sqrt(n) + 8) * U * bound_of) + 1e-30
        assert (np.abs(got - scale * expected) <= bound).all(), (name, float((np.abs(got - scale * expected)
                                                                               / bound).max()))


@pytest.mark.kernels_ci
def test_a_frozen_head_makes_dx_alone_and_the_weights_take_no_gradient(kernel, emulation, monkeypatch):
    lm_head = kernel.lm_head
    x, w, _, targets = operands(64, 128, 256, seed=13)
    m = np.full(64, 1 / 64, np.float32)
    asked = []
    real = lm_head.fused.loss_and_grads

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(kwargs["weight_grad"])
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_head.fused, "loss_and_grads", spy)
    with emulation.interpret_on_cpu("v6e"):
        dx, dm = jax.jit(jax.grad(lambda x, m: lm_head.loss.loss(x, w, jnp.asarray(targets), m, chunk=64),
                                  argnums=(0, 1)))(x, jnp.asarray(m))
    _, want_dx, *_ = _reference(x, w, None, targets, m, lm_head.IDENTITY, 0.0, 0.0)
    assert asked == [False]  # the weight is a constant here: its gradient is never made
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-6)
    assert not np.asarray(dm).any()


@pytest.mark.kernels_ci
def test_a_bias_of_the_wrong_shape_is_refused_by_name(kernel):
    x, w, _, targets = operands(8, 128, 256, seed=14)
    with pytest.raises(ValueError, match="tokamax lm_head loss: b must be"):
        kernel.lm_head.loss.loss(x, w, targets, np.ones(8, np.float32), b=np.zeros(255, np.float32))
