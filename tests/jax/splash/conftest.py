"""Upstream's side of the kernel-level splash checks, lowered once per test run in the upstream venv."""

from __future__ import annotations

import json
import subprocess

import jax
import pytest

from tests.conftest import REPO, tier_python


@pytest.fixture(scope="session")
def upstream_kernel_calls(tmp_path_factory) -> dict[str, str]:
    """Upstream's normalised module per kernel-level case and chip."""
    out = tmp_path_factory.mktemp("upstream-splash") / "splash.json"
    result = subprocess.run([tier_python("upstream"), str(REPO / "tests/jax/splash/upstream_run.py"), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["jax"] == jax.__version__, "both sides must lower with the same jax"
    return report["modules"]
