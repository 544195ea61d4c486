"""Torch tier: the bundle loads beside torch 2.13 and torch-tpu 0.2.0 on this CPU host."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import KERNEL_MODULES, REPO, VARIANT

pytestmark = pytest.mark.kernels_ci


# The Torch tiers by Python: the frozen pins each one runs (scripts/env.sh sets them up).
TIER_PINS = {(3, 12): "torch-tier.txt", (3, 11): "torch-tier-py311.txt", (3, 13): "torch-tier-py313.txt"}


def test_this_tier_runs_its_pinned_stack():
    """torch, torch-tpu and jax as this Python's tier pins them (a local version such as +cpu aside)."""
    from importlib.metadata import version

    assert sys.version_info[:2] in TIER_PINS, f"no Torch tier runs Python {sys.version_info[:2]}"
    pins = dict(line.strip().split("==") for line in (REPO / "requirements" / TIER_PINS[sys.version_info[:2]])
                .read_text().splitlines() if "==" in line)
    for name in ("torch", "torch_tpu", "jax", "jaxlib"):
        assert version(name).split("+")[0] == pins[name], f"{name} {version(name)}, pinned {pins[name]}"
    import jax
    import torch
    import torch_tpu  # noqa: F401

    assert torch.__version__.split("+")[0] == pins["torch"] and jax.__version__ == pins["jax"]


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
