"""Tuning where only JAX is installed: `tune_functions` without a chip named tunes for the host's (the emulated
chip on a CPU host) and never imports torch; a saved recording of Torch op calls says what to load first."""

from __future__ import annotations

import importlib.util
import json
import sys

import jax
import jax.numpy as jnp
import pytest

pytestmark = pytest.mark.kernels_ci


def test_tune_functions_takes_this_hosts_chip_without_torch(kernel, monkeypatch):
    assert importlib.util.find_spec("torch") is None, "the JAX tier has no torch"
    monkeypatch.setenv("TOKAMAX_CPU_CHIP", "v5e")
    assert kernel.emulation.attached_chip() is None
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    tuned = kernel.tuning.tune_functions([("double", lambda a: a * 2, (x,))], progress_bar=False)
    assert tuned.device_kind == "TPU v5 lite" and tuned.entries == {}
    assert [s.op for s in tuned.skipped] == ["double"] and "no upstream Op" in tuned.skipped[0].reason
    assert "torch" not in sys.modules


def test_a_recording_of_torch_calls_needs_the_torch_ops_loaded(kernel, tmp_path):
    path = tmp_path / "calls.json"
    path.write_text(json.dumps({"tokamax_recording": 1, "calls": [
        {"op": "gmm", "args": [{"shape": [256, 128], "dtype": "bfloat16"}, {"static": False}]}]}))
    assert not kernel.tuning.recorded.FUNCTIONS, "no Torch op is made where there is no torch"
    with pytest.raises(RuntimeError, match=r"calls.json holds Torch op calls, and no Torch op is loaded in this "
                                           r"process: load them first \(`tokamax.torch_ops`"):
        kernel.tuning.tune_recording(path, chip="v6e", progress_bar=False)
