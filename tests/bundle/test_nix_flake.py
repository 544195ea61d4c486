"""flake.nix evaluated with Debian's nix-bin, offline: it hands kernel-builder a `path` kernel-builder accepts.

The flake's `outputs` runs against a stand-in `kernel-builder` input (nix/kernel_builder_stand_in.nix)
that enforces kernel-builder's contracts on `genKernelFlakeOutputs`' arguments. Where a real
evaluation would build the port derivation (import from derivation, with fetchPypi's network
fetches), the stand-in's `runCommand` returns instead the tree that build writes, written here by
tools/bundle/source_tree.py: the evaluation of the flake's own logic stops there. The last test
shows, with a derivation Nix can build offline, that the route flake.nix takes (nix/path-of-output.nix)
gives a path value that pure evaluation can read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.bundle import source_set
from tests.conftest import REPO
from tests.nix_tools import FLAKES, nix_eval, nix_string, nix_tool
from tools.bundle import source_tree

pytestmark = pytest.mark.kernels_ci

STAND_IN = REPO / "tests/bundle/nix/kernel_builder_stand_in.nix"
PATH_LINE = "path = import ./nix/path-of-output.nix kernelSource;"
OVERRIDE = ("      torchVersions =\n        versions: map (version: if version.tpu or false then version // "
            "{ bundleBuild = true; } else version) versions;\n")


@pytest.fixture(scope="module")
def built_tree(tmp_path_factory) -> Path:
    """What the flake's port derivation writes to $out, written here from this checkout's port."""
    out = tmp_path_factory.mktemp("kernel-source") / "out"
    source_tree.write(source_tree.source_tree(REPO), out)
    return out


def _evaluate(flake_dir: Path, tree: Path, select: str, self_attrs: str = 'shortRev = "0123abc";'):
    """Runs the flake's outputs with the stand-in input; returns nix-instantiate's result for `select`."""
    expression = f"""
      let
        flake = import {nix_string(str(flake_dir / "flake.nix"))};
        kernel-builder = import {nix_string(str(STAND_IN))} {{ builtTree = {nix_string(str(tree))}; }};
        self = {{ outPath = {nix_string(str(REPO))}; {self_attrs} }};
        outputs = flake.outputs {{ inherit self kernel-builder; }};
      in outputs.packages.x86_64-linux.{select}"""
    return nix_eval(expression)


def _flake_copy(tmp_path: Path, text: str) -> Path:
    """A copy of flake.nix (with `text` as its content) and the nix/ files it imports."""
    (tmp_path / "flake.nix").write_text(text)
    shutil.copytree(REPO / "nix", tmp_path / "nix")
    return tmp_path


def test_flake_parses():
    result = subprocess.run([nix_tool("nix-instantiate"), "--parse", str(REPO / "flake.nix")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_flake_hands_kernel_builder_a_path_value_it_accepts(built_tree):
    result = _evaluate(REPO, built_tree, "redistributable.torch-tpu")
    assert result.returncode == 0, result.stderr
    variant = json.loads(result.stdout)
    assert variant["checked"] and variant["pathIsPathValue"] and variant["moduleName"] == "tokamax"
    assert variant["flakeRev"] == "0123abc"
    tree = [p.relative_to(built_tree).as_posix() for p in built_tree.rglob("*") if p.is_file()]
    build_toml = tomllib.loads((built_tree / "build.toml").read_text())
    assert set(variant["sourceFiles"]) == source_set.source_files(tree, build_toml), \
        "the Nix evaluation and tests/bundle/source_set.py select different files"
    assert any(p.startswith("torch-ext/tokamax/_ported/LICENSES/") for p in variant["sourceFiles"])


def test_the_bundle_ships_the_kernels_benchmark_files(built_tree):
    result = _evaluate(REPO, built_tree, "bundle.shipsBenchmarks")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) is True


def test_the_bundle_holds_the_tpu_variant_and_redistributable_is_unchanged(built_tree):
    result = _evaluate(REPO, built_tree, "bundle.variants")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["torch-tpu"]
    result = _evaluate(REPO, built_tree, "redistributable")
    assert result.returncode == 0, result.stderr
    redistributable = json.loads(result.stdout)
    assert list(redistributable) == ["torch-tpu"]  # build.toml names tpu only: no CPU or CUDA set applies
    assert redistributable["torch-tpu"]["torchVersion"] == "2.11" and redistributable["torch-tpu"]["bundleBuild"]


def test_a_flake_without_the_override_bundles_nothing(built_tree, tmp_path):
    flake = (REPO / "flake.nix").read_text()
    assert flake.count(OVERRIDE) == 1
    without = _flake_copy(tmp_path, flake.replace(OVERRIDE, ""))
    result = _evaluate(without, built_tree, "bundle.variants")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []  # kernel-builder's TPU set is not a bundle build
    result = _evaluate(without, built_tree, "redistributable.torch-tpu.bundleBuild")
    assert result.returncode == 0 and json.loads(result.stdout) is False, result.stderr


def test_torch_versions_that_is_not_a_function_is_refused(built_tree, tmp_path):
    flake = (REPO / "flake.nix").read_text()
    wrong = _flake_copy(tmp_path, flake.replace(OVERRIDE, "      torchVersions = [ ];\n"))
    result = _evaluate(wrong, built_tree, "bundle.variants")
    assert result.returncode != 0
    assert "`torchVersions` must be a function taking one argument" in result.stderr


def test_a_flake_passing_the_port_derivation_as_path_is_refused(built_tree, tmp_path):
    flake = (REPO / "flake.nix").read_text()
    assert flake.count(PATH_LINE) == 1
    wrong = _flake_copy(tmp_path, flake.replace(PATH_LINE, "path = kernelSource;"))
    result = _evaluate(wrong, built_tree, "redistributable.torch-tpu.sourceFiles")
    assert result.returncode != 0
    assert "lib.fileset.toSource: `root`" in result.stderr
    assert "is a string-like value, but it should be a path instead" in result.stderr


@pytest.mark.parametrize(("remove", "self_attrs", "message"), [
    ("build.toml", 'shortRev = "0123abc";', "build.toml"),
    ("torch-ext/tokamax/__init__.py", 'shortRev = "0123abc";', "must contain __init__.py"),
    (None, "", "Kernel is not in a git repository"),
])
def test_the_stand_in_enforces_kernel_builders_contracts(built_tree, tmp_path, remove, self_attrs, message):
    tree = tmp_path / "tree"
    shutil.copytree(built_tree, tree)
    if remove:
        (tree / remove).unlink()
    result = _evaluate(REPO, tree, "redistributable.torch-tpu.checked", self_attrs)
    assert result.returncode != 0 and message in result.stderr, result.stderr


_IFD_FLAKE = """{
  outputs = { self }:
    let
      tree = derivation {
        name = "kernel-source";
        system = "x86_64-linux";
        builder = "/bin/sh";
        args = [ "-c" ''
          /bin/mkdir -p $out/torch-ext/k && echo '[general]' > $out/build.toml && : > $out/torch-ext/k/__init__.py
        '' ];
      };
      path = import ./nix/path-of-output.nix tree;
      unconverted = /. + builtins.unsafeDiscardStringContext "${tree}";
    in {
      viaHelper = {
        isPath = builtins.isPath path;
        buildToml = builtins.readFile (path + "/build.toml");
        init = builtins.pathExists (path + "/torch-ext/k/__init__.py");
      };
      withoutHelper = builtins.readFile (unconverted + "/build.toml");
    };
}
"""


def _nix_eval_flake(flake_dir: Path, attribute: str) -> subprocess.CompletedProcess:
    """`nix eval` of a flake attribute in pure mode (flakes), building what it needs locally and offline."""
    command = [nix_tool("nix"), *FLAKES, "eval", "--json", "--option", "eval-cache", "false",
               "--option", "sandbox", "false", "--option", "substituters", "", f"path:{flake_dir}#{attribute}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_import_from_derivation_gives_a_path_that_pure_evaluation_reads(tmp_path):
    flake_dir = _flake_copy(tmp_path, _IFD_FLAKE)
    result = _nix_eval_flake(flake_dir, "viaHelper")
    if result.returncode != 0 and "permission denied" in result.stderr.lower():
        pytest.skip(f"this user cannot build into the Nix store here: {result.stderr.strip()[-300:]}")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"isPath": True, "buildToml": "[general]\n", "init": True}
    # The same output, made a path value without being realised through the helper: pure evaluation refuses it.
    refused = _nix_eval_flake(flake_dir, "withoutHelper")
    assert refused.returncode != 0 and "forbidden in pure eval mode" in refused.stderr, refused.stderr
