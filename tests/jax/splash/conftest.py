"""Upstream's side of the kernel-level splash checks, lowered once per test run in the upstream venv."""

from __future__ import annotations

import pytest

from tests.jax.conftest import upstream_report


@pytest.fixture(scope="session")
def upstream_kernel_calls(tmp_path_factory) -> dict[str, str]:
    """Upstream's normalised module per kernel-level case and chip."""
    out = tmp_path_factory.mktemp("upstream-splash") / "splash.json"
    return upstream_report("tests/jax/splash/upstream_run.py", out)["modules"]
