"""The LM head's statistics and their gradients in float64 numpy, from the definitions: the reference of the
kernels' test and of the stored scheme's."""

from __future__ import annotations

import numpy as np


def operands(rows: int, hidden: int, vocab: int, seed: int, dtype=np.float32):  # noqa: ANN001, ANN201
    r = np.random.default_rng(seed)
    x = (r.standard_normal((rows, hidden)) / np.sqrt(hidden)).astype(dtype)
    w = r.standard_normal((vocab, hidden)).astype(dtype)
    b = (r.standard_normal(vocab) / 4).astype(np.float32)
    targets = r.integers(0, vocab, rows).astype(np.int32)
    return x, w, b, targets


def reference(x, w, b, targets, transform):  # noqa: ANN001, ANN201
    """The statistics and z, p in float64, from the definitions."""
    raw = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T + (0 if b is None else np.asarray(b, np.float64))
    z = transform.post * np.tanh(transform.pre * raw) if transform.tanh else transform.pre * transform.post * raw
    top = z.max(1, keepdims=True)
    lse = np.log(np.exp(z - top).sum(1)) + top[:, 0]
    p = np.exp(z - lse[:, None])
    rows = np.arange(len(targets))
    first_max = np.argmax(z, 1)  # numpy's argmax: the first maximum
    stats = dict(lse=lse, target_logit=z[rows, targets], mean_logit=(p * z).sum(1), entropy=lse - (p * z).sum(1),
                 log_sum_sq_probs=np.log((p * p).sum(1)), sum_logits=z.sum(1),
                 top1=(first_max == targets).astype(np.float64))
    return stats, z, p, raw


def gradients(x, w, b, targets, transform, cotangents, g_raw_only=False):  # noqa: ANN001, ANN201
    """d(sum_r g_lse lse + g_t z_t + g_h H + g_sum sum z)/d(x, w, b) in float64 (H the entropy); or the
    gradient of the raw logits alone."""
    stats, z, p, raw = reference(x, w, b, targets, transform)
    g_lse, g_t, g_h, g_sum = (np.asarray(c, np.float64)[:, None] for c in cotangents)
    onehot = np.zeros_like(z)
    onehot[np.arange(len(targets)), targets] = 1
    log_p = z - stats["lse"][:, None]
    g_z = g_lse * p + g_t * onehot + g_sum - g_h * p * (log_p + stats["entropy"][:, None])
    if transform.tanh:
        g_raw = g_z * transform.post * transform.pre * (1 - np.tanh(transform.pre * raw) ** 2)
    else:
        g_raw = g_z * transform.pre * transform.post
    if g_raw_only:
        return g_raw
    return g_raw @ np.asarray(w, np.float64), g_raw.T @ np.asarray(x, np.float64), g_raw.sum(0)


def assert_bf16_close(stats, dx, dw, x, w, targets, transform, cotangents):  # noqa: ANN001, ANN201
    """bf16 x and w against float64 of the same bf16 values: float32 accumulators, so the statistics are as exact as
    float32's; the gradient enters its matmuls in bf16 (as TRL rounds its logits' gradient to the compute dtype) and
    the gradients come back in bf16: errors of 2^-8 of the largest gradient, not of each."""
    want = reference(x, w, None, targets, transform)[0]
    for name in ("lse", "target_logit", "entropy", "log_sum_sq_probs"):
        np.testing.assert_allclose(np.asarray(getattr(stats, name)), want[name], rtol=1e-5, atol=1e-4, err_msg=name)
    want_dx, want_dw, _ = gradients(x, w, None, targets, transform, cotangents)
    assert str(dx.dtype) == str(dw.dtype) == "bfloat16", (dx.dtype, dw.dtype)
    for name, got, want_g in (("dx", dx, want_dx), ("dw", dw, want_dw)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want_g, rtol=2e-2, atol=8e-3 * np.abs(want_g).max(),
                                   err_msg=name)
