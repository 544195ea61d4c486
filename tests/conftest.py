"""Shared test fixtures: repository paths and the pinned artifacts, fetched once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import venvs  # noqa: E402
from tools.porter import artifacts  # noqa: E402
from tools.porter.recipe import load_recipe  # noqa: E402

RECIPE = REPO / "tokamax/port/port.kdl"
LOCK = REPO / "tokamax/port/port.lock.json"
CACHE = REPO / ".cache/artifacts"
PORTED = REPO / "torch-ext/tokamax/_ported"
VARIANT = REPO / "build/torch-tpu"


def _kernel_modules() -> tuple[str, ...]:
    """The kernel package's KERNEL_MODULES, read from its source (importing it would need JAX)."""
    import ast

    tree = ast.parse((REPO / "torch-ext/tokamax/__init__.py").read_text())
    for node in tree.body:
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.Assign) and names == ["KERNEL_MODULES"]:
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("torch-ext/tokamax/__init__.py defines no KERNEL_MODULES")


KERNEL_MODULES = _kernel_modules()


@pytest.fixture(scope="session")
def artifact_paths() -> dict[str, Path]:
    """Each recipe artifact's file in the warm cache (fetched by pip if missing), by package."""
    recipe = load_recipe(RECIPE)
    return {step.props["package"]: artifacts.fetch(step, CACHE) for step in recipe.artifacts()}


def tier_python(tier: str) -> str:
    """The python of another tier's venv (scripts/env.sh sets it up on first use)."""
    try:
        return venvs.tier_python(tier)
    except venvs.VenvError as e:
        pytest.fail(str(e))
