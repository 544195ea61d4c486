"""Torch tier: the bundle loads beside torch 2.13 and torch-tpu 0.2.0 on this CPU host."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import KERNEL_MODULES, REPO, VARIANT

pytestmark = pytest.mark.kernels_ci


def test_torch_tier_versions():
    import jax
    import torch
    import torch_tpu  # noqa: F401

    assert torch.__version__.split("+")[0] == "2.13.0" and jax.__version__ == "0.10.2"
    assert sys.version_info[:2] == (3, 11)


def test_get_kernel_with_local_kernels_loads_the_tpu_variant():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(LOCAL_KERNELS=f"kernels-community/tokamax={VARIANT}", PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, str(REPO / "tests/bundle/load_kernel.py"), "get_kernel_after_torch",
                             str(VARIANT)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["name"].startswith("_tokamax_tpu_") and len(report["modules"]) == len(KERNEL_MODULES)
    assert report["tokamax_modules"] == [] and report["dropped_loaded"] == []
    assert report["torch_backends"] == ["torch_tpu"]
