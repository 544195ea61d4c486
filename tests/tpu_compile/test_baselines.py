"""The benchmark's stand-ins for TRL's tiles and transformers' logits compute what they stand for: the
same gradients and entropies as float64 NumPy, at a vocabulary that the tile does not divide."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tools.tpu_compile import baselines


def _float64(x: np.ndarray, w: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, ...]:
    z = x @ w.T
    log_p = z - z.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    p = np.exp(log_p)
    dz = p.copy()
    dz[np.arange(len(targets)), targets] -= 1.0  # d(-sum log p_target)/dz
    return dz @ w, dz.T @ x, -(p * log_p).sum(1)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("head", ["trl_tiles", "transformers_logits"])
def test_baseline_matches_float64(head, monkeypatch):
    monkeypatch.setattr(baselines, "TRL_TOKEN_TILE", 8)
    monkeypatch.setattr(baselines, "TRL_VOCAB_TILE", 64)
    r = np.random.default_rng(0)
    x, w = r.standard_normal((24, 32)), r.standard_normal((200, 32)) * 0.5  # 200 = 3 tiles of 64 and 8 more
    targets = r.integers(0, 200, 24)
    with jax.default_device(jax.devices("cpu")[0]):
        (dx, dw), entropy = jax.jit(getattr(baselines, head)(None))(
            jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32), jnp.asarray(targets, jnp.int32))
    ex, ew, ee = _float64(x, w, targets)
    # float32 sums of at most 200 terms of size <= ~10: a bound of 1e-4 relative to the largest entry
    for got, want in ((dx, ex), (dw, ew), (entropy, ee)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=1e-4 * np.abs(want).max())
