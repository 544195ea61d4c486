"""The benchmark's stand-in for TRL's distillation tiles (`tools/tpu_compile/distill_baselines.py`) computes
what it stands for: the JSD's gradients in the student's hidden states and weight and the student's entropy
as float64 autodiff of the definitions (tests/jax/distill/reference.py), at a vocabulary the tile does not
divide and hidden sizes that differ; and this kernel's side the same."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.distill.reference import reference
from tools.tpu_compile import baselines, distill_baselines


@pytest.mark.kernels_ci
def test_trls_tiles_match_float64(monkeypatch):
    monkeypatch.setattr(baselines, "TRL_TOKEN_TILE", 8)
    monkeypatch.setattr(baselines, "TRL_VOCAB_TILE", 64)
    r = np.random.default_rng(0)
    xs, ws = r.standard_normal((24, 32)) * 0.3, r.standard_normal((200, 32))  # 200 = 3 tiles of 64 and 8 more
    xt, wt = r.standard_normal((24, 48)) * 0.4, r.standard_normal((200, 48))
    ops = [a.astype(np.float32) for a in (xs, ws, xt, wt)]
    with jax.default_device(jax.devices("cpu")[0]):
        (dx, dw), entropy = jax.jit(distill_baselines.trl_tiles(None))(*(jnp.asarray(a) for a in ops))
    _, want_entropy, (want_dx, want_dw, _) = reference((ops[0], ops[1], None, ops[2], ops[3], None),
                                                        dict(beta=distill_baselines.BETA), np.ones(24), np.zeros(24))
    # float32 sums of at most 200 terms of size <= ~10: a bound of 1e-4 relative to the largest entry
    for got, want in ((dx, want_dx), (dw, want_dw), (entropy, want_entropy)):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=1e-4 * np.abs(want).max())
