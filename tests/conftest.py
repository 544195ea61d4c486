"""Shared test fixtures: repository paths and the pinned artifacts, fetched once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.porter import artifacts  # noqa: E402
from tools.porter.recipe import load_recipe  # noqa: E402

RECIPE = REPO / "tokamax/port/port.kdl"
LOCK = REPO / "tokamax/port/port.lock.json"
CACHE = REPO / ".cache/artifacts"
PORTED = REPO / "torch-ext/tokamax/_ported"
VARIANT = REPO / "build/torch-tpu"


@pytest.fixture(scope="session")
def artifact_paths() -> dict[str, Path]:
    """Each recipe artifact's file in the warm cache (fetched by pip if missing), by package."""
    recipe = load_recipe(RECIPE)
    return {step.props["package"]: artifacts.fetch(step, CACHE) for step in recipe.artifacts()}
