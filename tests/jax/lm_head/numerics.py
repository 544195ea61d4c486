"""Confident rows (logits ~40, near one-hot) and the float32 error bound of their entropy, shared by the
kernel's test and TRL's head's (tests/torch/trl)."""

from __future__ import annotations

import numpy as np

U = 2.0 ** -24  # float32's unit roundoff


def confident_logits(rows: int, vocab: int, seed: int) -> np.ndarray:
    """float32 [rows, vocab]: per row one token at +-35..45, the others a gap of 12..22 (the row's) and up to
    2 more below it: entropies of ~1e-8 to ~1e-3, where E_p[z] and the log-sum-exp of ~40 agree to ~1e-6."""
    r = np.random.default_rng(seed)
    top = r.choice([-1.0, 1.0], rows) * r.uniform(35, 45, rows)
    z = top[:, None] - r.uniform(12, 22, (rows, 1)) - r.uniform(0, 2, (rows, vocab))
    z[np.arange(rows), r.integers(0, vocab, rows)] = top
    return z.astype(np.float32)


def entropy_bound(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float64 entropy, the float32 error bound of the shifted accumulation) per row of float32 logits z
    [rows, vocab]: d = z - max exact or to u|d|, e^d to (|d| + 2)u, s = sum e^d and S = sum e^d d summed to
    (vocab - 1)u of their magnitude (s >= 1), then H = log s - S / s: |dH| <= u [(vocab + 1) + 2 (vocab +
    2 max|d| + 6) H] (|S| / s and log s are each <= H)."""
    z64 = z.astype(np.float64)
    d = z64 - z64.max(1, keepdims=True)
    s, big_s = np.exp(d).sum(1), (np.exp(d) * d).sum(1)
    h = np.log(s) - big_s / s
    vocab, depth = z.shape[1], np.abs(d).max(1)
    return h, U * ((vocab + 1) + 2 * (vocab + 2 * depth + 6) * h)
