"""The kernel-builder files at the repo root: build.toml, kernels.lock, flake.nix, CARD.md."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tomllib

import pytest
from kernels._rust import Build, KernelLocks

from tests.conftest import RECIPE, REPO
from tools.porter.recipe import load_recipe

pytestmark = pytest.mark.kernels_ci


def test_build_toml_validates_with_the_parser_in_kernels():
    Build.open(REPO)
    general = tomllib.loads((REPO / "build.toml").read_text())["general"]
    assert (general["name"], general["version"], general["edition"], general["backends"]) == ("tokamax", 1, 5, ["tpu"])
    assert general["license"] == "Apache-2.0" and general["upstream"]
    assert general["hub"]["repo-id"] == "kernels-community/tokamax"
    assert "python-depends" not in general  # jax is not on kernels' allow-list; nothing else is needed


def test_a_broken_build_toml_is_rejected(tmp_path):
    (tmp_path / "build.toml").write_text((REPO / "build.toml").read_text().replace("[kernel]", "[kernel]\nx = 1"))
    with pytest.raises(ValueError, match="build.toml"):
        Build.open(tmp_path)


def test_kernels_lock_is_the_empty_lock_kernels_writes():
    text = (REPO / "kernels.lock").read_text()
    locks = KernelLocks.from_json(text)
    assert len(locks) == 0 and text == locks.to_json() + "\n"


def test_flake_pins_the_recipe_artifacts():
    flake = (REPO / "flake.nix").read_text()
    fetch = r'pname = "([\w-]+)";\s*version = "[^"]+";(?:\s*\w+ = "[^"]+";)*\s*hash = "(sha256-[^"]+)"'
    pinned = dict(re.findall(fetch, flake))
    for step in load_recipe(RECIPE).artifacts():
        sri = "sha256-" + base64.b64encode(bytes.fromhex(step.props["sha256"])).decode()
        assert pinned.get(step.props["package"]) == sri, f"flake.nix does not pin {step.props['package']} as the recipe"
    assert "genKernelFlakeOutputs" in flake and "path = portedSource" in flake


def test_flake_parses():
    nix = shutil.which("nix-instantiate")
    if nix is None:
        if os.environ.get("TOKAMAX_REQUIRE_NIX"):
            pytest.fail("nix-instantiate is required here (TOKAMAX_REQUIRE_NIX is set) but not installed")
        pytest.skip("nix-instantiate not installed (Debian's nix-bin provides it; CI installs it)")
    result = subprocess.run([nix, "--parse", str(REPO / "flake.nix")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_card_describes_the_kernel():
    card = (REPO / "CARD.md").read_text()
    assert "kernels-community/tokamax" in card and "get_kernel" in card
