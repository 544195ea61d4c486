"""`tokamax.lm_loss` in Pallas TPU interpret mode (jax 0.12) against float64 numpy: per-row losses,
log-sum-exps and the gradients of a weighted sum of the losses, at sizes off the kernel's lanes
(rows, hidden and vocabulary each), so every padding (zero rows, zero hidden columns, the padded
vocabulary's logit column) is exercised with upstream's real kernels; and what the padding adds."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.jax.cases import on_tensorcores

# f32 operands, exact f32 matmuls in interpret mode: the tiled summation order and the online softmax
# differ from float64 (~1e-6 relative).
TOL = dict(rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(("rows", "hidden", "vocab"), [(37, 64, 200), (300, 256, 1000), (128, 128, 128),
                                                       (40, 200, 130)])
def test_row_losses_and_gradients(kernel, emulation, rows, hidden, vocab):
    lm_loss = kernel.lm_loss
    r = np.random.default_rng(rows + vocab)
    x = (r.standard_normal((rows, hidden)) / np.sqrt(hidden)).astype(np.float32)
    w = r.standard_normal((hidden, vocab)).astype(np.float32)
    labels = r.integers(0, vocab, rows).astype(np.int32)
    d = r.standard_normal(lm_loss.padded_rows(rows)).astype(np.float32)
    d[rows:] = 0  # the padded rows carry nothing, as the callers give them

    def run(x, w):  # noqa: ANN001, ANN202
        losses, lse = lm_loss.row_losses(x, labels, w)
        return (losses, lse, *lm_loss.row_losses_vjp(x, labels, w, lse, losses, d))

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        losses, lse, dx, dw = jax.jit(on_tensorcores(run))(x, w)
    assert losses.shape == lse.shape == (lm_loss.padded_rows(rows),) and dx.shape == x.shape and dw.shape == w.shape
    logits = x.astype(np.float64) @ w.astype(np.float64)
    top = logits.max(1, keepdims=True)
    want_lse = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
    d_logits = np.exp(logits - want_lse[:, None])
    d_logits[np.arange(rows), labels] -= 1
    d_logits *= d[:rows, None]
    for name, got, want in (("losses", losses[:rows], want_lse - logits[np.arange(rows), labels]),
                            ("lse", lse[:rows], want_lse), ("dx", dx, d_logits @ w.T), ("dw", dw, x.T @ d_logits)):
        np.testing.assert_allclose(np.asarray(got), want, err_msg=name, **TOL)


@pytest.mark.kernels_ci
def test_padding_shapes(kernel):
    """Each dimension to a multiple of 128; one hidden column more when the vocabulary is off the lanes."""
    lm_loss = kernel.lm_loss
    sd = jax.ShapeDtypeStruct
    for (rows, hidden, vocab), want in (((37, 64, 200), ((128, 128), (128,), (128, 256))),
                                        ((128, 128, 256), ((128, 128), (128,), (128, 256))),
                                        ((300, 128, 130), ((384, 256), (384,), (256, 256))),
                                        ((1, 4096, 151936), ((128, 4096), (128,), (4096, 151936)))):
        shapes = jax.eval_shape(lm_loss.padded_operands, sd((rows, hidden), np.float32), sd((rows,), np.int32),
                                sd((hidden, vocab), np.float32))
        assert tuple(s.shape for s in shapes) == want, (rows, hidden, vocab)
