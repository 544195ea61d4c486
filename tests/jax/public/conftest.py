"""Upstream's side of the public-call checks, computed once per test run in the upstream venv."""

from __future__ import annotations

import json
import subprocess

import jax
import pytest

from tests.conftest import REPO, tier_python


@pytest.fixture(scope="session")
def upstream_public(tmp_path_factory) -> dict:
    """Upstream's normalised modules per public case, and its config choice per table key."""
    out = tmp_path_factory.mktemp("upstream-public") / "public.json"
    result = subprocess.run([tier_python("upstream"), str(REPO / "tests/jax/public/upstream_run.py"), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["jax"] == jax.__version__, "both sides must lower with the same jax"
    return report


@pytest.fixture(scope="session")
def public_api(kernel):  # noqa: ANN001, ANN201
    from tests.jax.public import api

    return api.ours(kernel)
