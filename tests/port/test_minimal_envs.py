"""Every kernel module, public op and the JAX splash layer imports, and autotuning runs, where only JAX
is installed (3.12/jax 0.12, 3.11/jax 0.10.2), and with the upstream suite's test-only libraries
installed but blocked."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import KERNEL_MODULES, PORTED, REPO, tier_python


@pytest.mark.parametrize(("tier", "python", "jax_prefix"), [("jax-only", "3.12", "0.12."),
                                                             ("jax-only-py311", "3.11", "0.10.2")])
def test_every_kernel_module_imports_with_only_jax(tier, python, jax_prefix):
    assert (PORTED / "PROVENANCE.json").exists(), "run the port first (the test command does)"
    exe = tier_python(tier)
    freeze = subprocess.run([exe, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    installed = {line.split("==")[0].lower() for line in freeze.split()}
    assert installed <= {"jax", "jaxlib", "ml_dtypes", "ml-dtypes", "numpy", "opt_einsum", "opt-einsum", "scipy"}, (
        f"the {tier} venv holds more than JAX: {sorted(installed)}")
    result = subprocess.run([exe, str(REPO / "tests/port/import_package.py"), str(REPO / "torch-ext/tokamax")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["python"] == python and report["jax"].startswith(jax_prefix)
    assert len(report["imported"]) == len(KERNEL_MODULES)
    assert {"ragged_dot", "ragged_dot_general", "config", "tpu.RaggedDot", "tpu.V2RaggedDot",
            "experimental.splash_attention", "experimental.tpu.SplashAttention"} <= set(report["public"])
    assert report["splash_mask"] == "LocalMask"
    assert report["autotuned"] == [3] and report["device_kind"] == "TPU v6 lite"  # its 3 candidates, no tqdm
    assert report["dropped_loaded"] == []


def test_kernel_imports_with_the_suite_test_libraries_blocked():
    """The upstream-suite venv holds what upstream's tests import (absl, pydantic, jaxtyping, qwix,
    chex, hypothesis, flax); the kernel loads there with every one of them blocked."""
    exe = tier_python("upstream-suite")
    freeze = subprocess.run([exe, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in freeze.split()}
    assert {"absl-py", "pydantic", "jaxtyping", "qwix", "chex", "hypothesis", "flax"} <= installed
    assert "tokamax" not in installed
    result = subprocess.run([exe, str(REPO / "tests/port/import_package.py"), str(REPO / "torch-ext/tokamax")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["imported"]) == len(KERNEL_MODULES) and report["dropped_loaded"] == []
    assert report["autotuned"] == [3]
