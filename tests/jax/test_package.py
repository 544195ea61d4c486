"""The package where only JAX is there (no torch, no torch-tpu): it loads, the kernels work."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.kernels_ci


def test_torch_ops_explain_what_they_need_and_jax_modules_still_work(kernel):
    assert importlib.util.find_spec("torch") is None, "the JAX tier has no torch"
    with pytest.raises(ImportError, match=r"torch_ops needs torch and torch-tpu .* JAX kernel modules work"):
        _ = kernel.torch_ops
    assert callable(kernel.ragged_dot.gmm) and callable(kernel.splash_attention.make_splash_mha)


def test_public_api(kernel):
    assert kernel.__version__ == "1.0.0" and kernel.TOKAMAX_VERSION == "0.0.17"
    assert set(kernel.__all__) >= {"ragged_dot", "gmm_v2", "splash_attention", "ring_attention", "emulation"}
    assert set(kernel.KERNEL_MODULES) <= set(dir(kernel))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = kernel.nope


def test_cpu_chip_is_explicit(kernel, monkeypatch):
    emulation = kernel.emulation
    monkeypatch.delenv("TOKAMAX_CPU_CHIP", raising=False)
    assert emulation.cpu_chip() == "v6e"
    monkeypatch.setenv("TOKAMAX_CPU_CHIP", "v5e")
    assert emulation.cpu_chip() == "v5e"
    monkeypatch.setenv("TOKAMAX_CPU_CHIP", "h100")
    with pytest.raises(ValueError, match="TOKAMAX_CPU_CHIP='h100' names no known TPU chip"):
        emulation.cpu_chip()
    with pytest.raises(ValueError, match="unknown TPU chip 'v9'"):
        emulation.tpu_mesh("v9")
