"""Splash calls under an autotuning result whose config cannot hold for them: the call still gives the
right numbers (checked in Pallas TPU interpret mode against float64 numpy attention).

A run-time offset's partial blocks lie anywhere (the queries sit at offset + i, the offset unknown when
tracing), while upstream's diagonal skips (`qk_diag_skip`, `sv_diag_skip`) mask every sub-tile above a
partial block's own diagonal. Upstream's tuner never names them for the dense-mask key such a call is
looked up under, but a result file can (edited, merged, or upstream's own for another call of that key).
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

TOL = dict(rtol=2e-4, atol=5e-5)  # f32; the online softmax reorders f32 sums
CHIP, DEVICE_KIND = "v6e", "TPU v6 lite"
Q_LEN, KV_LEN, OFFSET = 128, 256, 64  # one 128-row block at positions 64..191: both KV blocks partial


def _diagonal_skip_file(kernel, tmp_path, fn, args):  # noqa: ANN001, ANN202
    """A result file naming, for the call `fn(*args)`'s key, its heuristic config with square 128 blocks and
    both diagonal skips; and that config."""
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")
    api = importlib.import_module(f"{kernel.__name__}._ported._src.autotuning.api")
    autotuner = importlib.import_module(f"{kernel.__name__}._ported._src.autotuning.autotuner")
    benchmarking = importlib.import_module(f"{kernel.__name__}._ported._src.benchmarking")
    (ba,) = tune.bound_arguments(SimpleNamespace(jax_fn=fn, args=args), CHIP)
    with tune._chip_context(CHIP):
        config = dataclasses.replace(ba.heuristics_config, block_q=128, block_kv=128, block_kv_compute=128,
                                     qk_diag_skip=True, sv_diag_skip=True)
    timing = benchmarking.BenchmarkData(1.0, 1.0, (1.0,), {})
    result = api.AutotuningResult(DEVICE_KIND, ((ba, autotuner.AutotuningData({config: timing})),))
    path = tmp_path / "diagonal-skip.json"
    path.write_text(result.dumps())
    return path, ba, config


def test_a_run_time_offset_call_under_a_result_naming_diagonal_skip_keeps_every_key(kernel, emulation, tmp_path):
    """Causal queries at a run-time offset of 64 (not on a block's diagonal) under a file naming the diagonal
    skips for the call's key: before, the skips masked keys 64..127 of queries 64..127 (and more); now the
    call runs without them, says so, and matches float64 attention."""
    splash = kernel.splash
    r = np.random.default_rng(11)
    q = (r.standard_normal((1, 1, Q_LEN, 128)) * 0.3).astype(np.float32)
    k = (r.standard_normal((1, 1, KV_LEN, 128)) * 0.3).astype(np.float32)
    v = r.standard_normal((1, 1, KV_LEN, 128)).astype(np.float32)
    spec = splash.MaskSpec.of(True, None)

    def fn(q, k, v, offset):  # noqa: ANN001, ANN202
        return splash.attend_at(q, k, v, None, None, offset, None, spec=spec)

    specs = tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v))
    path, ba, config = _diagonal_skip_file(kernel, tmp_path, fn, (*specs, jax.ShapeDtypeStruct((), jnp.int32)))
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")
    with kernel.tuning.use(path), tune._chip_context(CHIP):
        assert ba.default_config == config  # the file names the diagonal skips for this call's key
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = np.asarray(jax.jit(fn)(q, k, v, jnp.int32(OFFSET)))

    positions = OFFSET + np.arange(Q_LEN)
    logits = np.einsum("qd,kd->qk", q[0, 0].astype(np.float64), k[0, 0].astype(np.float64))
    logits = np.where(np.arange(KV_LEN)[None, :] <= positions[:, None], logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v[0, 0].astype(np.float64)
    np.testing.assert_allclose(out[0, 0], want, **TOL)
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any(re.search(r"tokamax splash attend_at: .*qk_diag_skip / sv_diag_skip.*runs without them", m)
               for m in said), said
