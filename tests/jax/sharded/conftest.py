"""Upstream's side of the sharded lowering checks, computed once per run in the upstream venv."""

from __future__ import annotations

import pytest

from tests.jax.conftest import upstream_report


@pytest.fixture(scope="session")
def upstream_sharded(tmp_path_factory) -> dict:  # noqa: ANN001
    """Upstream's normalised sharded modules per case and chip, and the errors it raised."""
    out = tmp_path_factory.mktemp("upstream-sharded") / "sharded.json"
    return upstream_report("tests/jax/sharded/upstream_run.py", out)


@pytest.fixture(scope="session")
def sharded_api(kernel):  # noqa: ANN001, ANN201
    from tests.jax.public import api

    return api.ours(kernel)


@pytest.fixture(scope="session")
def our_sharded_lowering(sharded_api, emulation):  # noqa: ANN001, ANN201
    """(case, chip) -> this kernel's StableHLO of the sharded case (raised errors re-raised), lowered once."""
    from tests.jax.sharded.lowering import lower_sharded

    memo: dict[tuple[str, str], object] = {}

    def lowering(case, chip: str):  # noqa: ANN001, ANN202
        key = (case.id, chip)
        if key not in memo:
            try:
                memo[key] = lower_sharded(case, sharded_api, emulation, chip)
            except Exception as e:  # noqa: BLE001 - kept, and raised again at each use
                memo[key] = e
        if isinstance(memo[key], Exception):
            raise memo[key]
        return memo[key]

    return lowering
