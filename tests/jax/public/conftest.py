"""Upstream's side of the public-call checks, computed once per test run in the upstream venv."""

from __future__ import annotations

import pytest

from tests.jax.conftest import upstream_report


@pytest.fixture(scope="session")
def upstream_public(tmp_path_factory) -> dict:
    """Upstream's normalised modules per public case, and its config choice per table key."""
    out = tmp_path_factory.mktemp("upstream-public") / "public.json"
    return upstream_report("tests/jax/public/upstream_run.py", out)


@pytest.fixture(scope="session")
def public_api(kernel):  # noqa: ANN001, ANN201
    from tests.jax.public import api

    return api.ours(kernel)
