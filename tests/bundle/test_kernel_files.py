"""The kernel-builder files at the repo root: build.toml, kernels.lock, flake.nix, CARD.md.

flake.nix is evaluated in test_nix_flake.py; here its pins and its port script are read as text.
"""

from __future__ import annotations

import ast
import base64
import re
import sys
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


def test_flake_ports_inside_its_build_and_hands_kernel_builder_the_source_tree():
    """The port derivation's script (its evaluation is tests/bundle/test_nix_flake.py's)."""
    flake = (REPO / "flake.nix").read_text()
    script = flake[flake.index('runCommand "tokamax-kernel-source"'):flake.index("genKernelFlakeOutputs")]
    assert 'python -m tools.porter --cache "$NIX_BUILD_TOP/cache"' in script  # checks port.lock.json
    assert script.index("tools.porter") < script.index('python -m tools.bundle.source_tree "$out"')


def test_the_port_derivations_python_holds_what_the_port_imports():
    """flake.nix's portPython has ckdl and packaging; the modules the derivation runs may import nothing else."""
    flake = (REPO / "flake.nix").read_text()
    assert re.search(r"portPython = pkgs\.python312\.withPackages \(_: \[\s*ckdl\s*ps\.packaging\s*\]\)", flake)
    allowed = set(sys.stdlib_module_names) | {"ckdl", "packaging", "tools"}
    run = [REPO / "tools/__init__.py", REPO / "tools/bundle/__init__.py", REPO / "tools/bundle/source_tree.py"]
    for path in [*sorted((REPO / "tools/porter").glob("*.py")), *run]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            extra = [n for n in names if n.split(".")[0] not in allowed]
            assert not extra, f"{path.relative_to(REPO)} imports {extra}, which the Nix port build does not have"


def test_card_describes_the_kernel():
    card = (REPO / "CARD.md").read_text()
    assert "kernels-community/tokamax" in card and "get_kernel" in card
