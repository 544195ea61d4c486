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
    real = lm_head.fused.loss_and_pending

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(kwargs["weight_grad"])
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_head.fused, "loss_and_pending", spy)
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


def _bf16(a) -> np.ndarray:  # noqa: ANN001
    return np.asarray(jnp.asarray(a, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32))


def _rounded_once_not_twice(name: str, got, float32, scale: float) -> None:  # noqa: ANN001
    """got (bf16) is float32 x scale rounded once to bf16, where rounding float32 to bf16 first and then the product
    again (what the backward did) gives other values somewhere."""
    got = np.asarray(jnp.asarray(got).astype(jnp.float32))
    float32 = np.asarray(float32, np.float32)
    np.testing.assert_array_equal(got, _bf16(float32 * np.float32(scale)), err_msg=name)
    assert (_bf16(_bf16(float32) * np.float32(scale)) != got).any(), name


CHUNKED = {"float32": ("v6e", {}), "kernel-pair": ("v5e", {"pair_accumulator": True, "accumulator_kernel": True}),
           "streamed-pair-int8": ("v5e", {"streamed": True, "pair_accumulator": True, "scaled_low": True})}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("way", list(CHUNKED))
def test_a_cotangent_scales_the_float32_gradients_before_their_one_rounding(kernel, emulation, way):
    """Cotangent 3 (not a power of two: 3 g is not exact in bf16), bf16 operands, the chunked scheme in chunks of 128:
    dx and dW are the forward's float32 dx and dW (its float32 accumulator, or the pair's high + low) times 3 rounded
    once to bf16, and db 3 times the float32 db; those float32 values round to `loss_and_grads`' gradients (which
    `test_fused` holds to float64's). The backward scaled the bf16 gradients, rounding twice: other values. Through
    `loss.loss` under `jax.grad` (the scheme `accumulation` takes at 128 rows: XLA's float32 accumulator on the v6e),
    and through `fused.loss_and_pending` for the accumulate kernel's pair and the streamed kernels' int8 pair."""
    lm_head = kernel.lm_head
    rows, hidden, vocab, scale = 200, 128, 512, 3.0
    x, w, b, targets = operands(rows, hidden, vocab, seed=21, dtype=jnp.bfloat16)
    b = None if way.startswith("streamed") else b  # compact logits: no bias
    m = np.full(rows, 1 / rows, np.float32)
    chip, options = CHUNKED[way]
    with emulation.interpret_on_cpu(chip):
        def forward(x, w, b):  # noqa: ANN001, ANN202
            return lm_head.fused.loss_and_pending(x, w, b, jnp.asarray(targets), jnp.asarray(m), lm_head.IDENTITY,
                                                  chunk=128, **options)

        _, pending = jax.jit(forward)(x, w, b)
        dx, dw, db = jax.jit(lambda p: p(jnp.float32(scale)))(pending)
        if not options:  # the same through the JAX loss's backward
            got = jax.jit(jax.grad(lambda x, w, b: scale * lm_head.loss.loss(
                x, w, jnp.asarray(targets), jnp.asarray(m), b=b, chunk=128), argnums=(0, 1, 2)))(x, w, b)
            for name, a, c in zip(("dx", "dw", "db"), got, (dx, dw, db), strict=True):
                np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(c, np.float32), err_msg=name)
        _, dx1, dw1, db1 = jax.jit(lambda x, w, b: lm_head.fused.loss_and_grads(
            x, w, b, jnp.asarray(targets), jnp.asarray(m), lm_head.IDENTITY, chunk=128, **options))(x, w, b)
    dx32, acc, db32 = pending.args[0].args  # the forward's float32 dx, dW's accumulator, db
    if isinstance(acc, tuple):  # the pair: high + what its rounding left (int8: in 1/256ths of high's last place)
        high, low = acc
        dw32 = lm_head.accumulate.scaled_value(jnp.asarray(high, jnp.float32), low, 7) if low.dtype == jnp.int8 \
            else jnp.asarray(high, jnp.float32) + jnp.asarray(low, jnp.float32)
        np.testing.assert_array_equal(np.asarray(high, np.float32), np.asarray(dw1, np.float32))
    else:
        dw32 = acc
        np.testing.assert_array_equal(_bf16(dw32), np.asarray(dw1, np.float32))
    np.testing.assert_array_equal(_bf16(dx32), np.asarray(dx1, np.float32))
    _rounded_once_not_twice("dx", dx, dx32, scale)
    _rounded_once_not_twice("dw", dw, dw32, scale)
    if b is None:
        assert db is None and db1 is None
    else:
        np.testing.assert_array_equal(np.asarray(db), np.asarray(db32) * np.float32(scale))
        np.testing.assert_array_equal(np.asarray(db32), np.asarray(db1))


@pytest.mark.kernels_ci
def test_under_the_kernels_a_cotangent_scales_g_before_its_rounding(kernel, emulation):
    """The kernels (chunk=None) make dx and dW in the backward with the cotangent in their per-row coefficients, so
    both are rounded once: at cotangent 3 the gradients of the loss with weights 3 m at cotangent 1 (the same
    coefficients, bit for bit, without z-loss or smoothing), where 3 x the bf16 gradients at cotangent 1 rounded
    again (what the backward did) gives other values."""
    lm_head = kernel.lm_head
    rows, hidden, vocab, scale = 64, 128, 384, 3.0
    x, w, b, targets = operands(rows, hidden, vocab, seed=22, dtype=jnp.bfloat16)
    m = np.full(rows, 1 / rows, np.float32)

    def grads(weights, cotangent):  # noqa: ANN001, ANN202
        return jax.jit(jax.grad(lambda x, w, b: cotangent * lm_head.loss.loss(
            x, w, jnp.asarray(targets), jnp.asarray(weights), b=b, chunk=None), argnums=(0, 1, 2)))(x, w, b)

    with emulation.interpret_on_cpu("v6e"):
        got, want, once = grads(m, scale), grads(np.float32(scale) * m, 1.0), grads(m, 1.0)
    for name, a, c, g1 in zip(("dx", "dw", "db"), got, want, once, strict=True):
        a, c = np.asarray(a, np.float32), np.asarray(c, np.float32)
        np.testing.assert_array_equal(a, c, err_msg=name)
        if name != "db":  # db is float32: scaled in float32 either way
            assert (_bf16(np.asarray(g1, np.float32) * np.float32(scale)) != a).any(), name
