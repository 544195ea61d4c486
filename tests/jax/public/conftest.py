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


@pytest.fixture(scope="session")
def our_public_lowering(public_api, emulation):  # noqa: ANN001, ANN201
    """case -> this kernel's StableHLO of it (raised errors re-raised), lowered once per run."""
    from tests.jax.public.lowering import lower_public_raw

    memo: dict[tuple[str, str], object] = {}

    def lowering(case):  # noqa: ANN001, ANN202
        key = (case.id, case.chip)
        if key not in memo:
            try:
                memo[key] = lower_public_raw(case, public_api, emulation)
            except Exception as e:  # noqa: BLE001 - kept, and raised again at each use
                memo[key] = e
        if isinstance(memo[key], Exception):
            raise memo[key]
        return memo[key]

    return lowering
