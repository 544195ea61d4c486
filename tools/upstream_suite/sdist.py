"""Upstream's files from the pinned sdist the port reads (hash-checked by the porter's fetch)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tools.porter import artifacts
from tools.porter.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "tokamax/port/port.kdl"
CACHE = REPO / ".cache/artifacts"


def _sdist(package: str) -> tuple[dict[str, bytes], str]:
    step = next(s for s in load_recipe(RECIPE).artifacts() if s.props["package"] == package
                and s.props["dist"] == "sdist")
    return artifacts.read_artifact(artifacts.fetch(step, CACHE), "sdist"), step.props.get("root", package)


def upstream_package(package: str = "tokamax") -> dict[str, bytes]:
    """The sdist's files under its `tokamax/` folder, keyed by their path inside that folder."""
    files, root = _sdist(package)
    root = root.rstrip("/") + "/"
    return {rel[len(root):]: data for rel, data in files.items() if rel.startswith(root)}


def pytest_ini(package: str = "tokamax") -> str:
    """Upstream's `[tool.pytest.ini_options]` (its test markers) as a pytest.ini for the sites."""
    options = tomllib.loads(_sdist(package)[0]["pyproject.toml"].decode()).get("tool", {}).get(
        "pytest", {}).get("ini_options", {})
    lines = ["[pytest]"]
    for key, value in options.items():
        values = value if isinstance(value, list) else [value]
        lines += [f"{key} =", *(f"    {v}" for v in values)]
    return "\n".join(lines) + "\n"


def version(package: str = "tokamax") -> str:
    """The pinned version of `package` in the recipe."""
    return next(s.props["version"] for s in load_recipe(RECIPE).artifacts() if s.props["package"] == package)
