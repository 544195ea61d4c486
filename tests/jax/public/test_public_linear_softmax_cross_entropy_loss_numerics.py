"""Interpret-mode numerics of the public linear softmax cross-entropy loss (Mosaic), loss and gradients, on CPU.

The reference is float64 numpy written here: logits = x @ w, log-sum-exp, the labelled logit; gradients by hand
(softmax minus the one-hot label, through the projection). The kernels build a TensorCore mesh, so the call is
traced under a one-core abstract CPU mesh (`on_tensorcores`), as the kernel-level cases are.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.jax.cases import on_tensorcores

B, H, V = 256, 128, 512


def _operands() -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(5)
    x = (r.standard_normal((B, H)) / np.sqrt(H)).astype(np.float32)
    w = r.standard_normal((H, V)).astype(np.float32)
    return x, r.integers(0, V, size=B).astype(np.int32), w


def _reference(x: np.ndarray, labels: np.ndarray, w: np.ndarray, reduction: str) -> tuple[np.ndarray, ...]:
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    logits = x64 @ w64
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
    per_row = lse - logits[np.arange(B), labels]
    d_logits = np.exp(logits - lse[:, None])
    d_logits[np.arange(B), labels] -= 1.0
    if reduction == "mean":
        d_logits /= B
    return (per_row.sum() if reduction == "sum" else per_row.mean()), d_logits @ w64.T, x64.T @ d_logits


# f32 operands; the kernels' f32 matmuls are exact on CPU in interpret mode, so only the tiled summation order and
# the online softmax differ from float64: ~1e-6 relative. The summed loss is ~1.6e3 (256 rows of ~6).
TOL = dict(rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_loss_and_gradients(kernel, emulation, reduction):
    x, labels, w = _operands()

    def loss(x, w):  # noqa: ANN001, ANN202
        return kernel.ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction,
                                                            implementation="mosaic_tpu")

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        value, grads = jax.jit(on_tensorcores(jax.value_and_grad(loss, argnums=(0, 1))))(x, w)
    for name, got, want in zip(("loss", "dx", "dw"), (value, *grads), _reference(x, labels, w, reduction),
                               strict=True):
        np.testing.assert_allclose(np.asarray(got), want, err_msg=name, **TOL)
