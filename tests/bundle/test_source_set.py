"""The Nix build and the local bundle ship the same files: kernel-builder's source-set rules, applied here.

tools/bundle/source_tree.py writes the tree flake.nix hands kernel-builder; tests/bundle/source_set.py
models which of its files kernel-builder's noarch build puts into the variant. These tests need no
Nix; test_nix_flake.py checks the model against a Nix evaluation of the same tree.
"""

from __future__ import annotations

import ast
import tomllib

import pytest

from tests.bundle import source_set
from tests.conftest import REPO, VARIANT
from tools.bundle.source_tree import CI_TESTS, source_tree
from tools.porter.tree import read_tree

pytestmark = pytest.mark.kernels_ci

BUILD_TOML = tomllib.loads((REPO / "build.toml").read_text())


@pytest.fixture(scope="module")
def tree() -> dict[str, bytes]:
    return source_tree(REPO)


def test_the_nix_variant_and_build_torch_tpu_hold_the_same_files(tree):
    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    nix_variant = source_set.variant_files(tree, BUILD_TOML)
    bundle = set(read_tree(VARIANT))
    assert nix_variant == bundle, (f"only in the Nix build: {sorted(nix_variant - bundle)[:10]}; "
                                   f"only in build/torch-tpu: {sorted(bundle - nix_variant)[:10]}")
    assert {p for p in bundle if p.startswith("_ported/LICENSES/")}, "no license ships"
    assert "_ported/PROVENANCE.json" in bundle


def test_without_pyext_kernel_builder_would_drop_every_data_file_licenses_included(tree):
    default = dict(BUILD_TOML, **{"torch-noarch": {}})
    with_pyext = source_set.variant_files(tree, BUILD_TOML)
    dropped = with_pyext - source_set.variant_files(tree, default)
    assert dropped == {p for p in with_pyext - {"metadata.json"} if not p.endswith((".py", ".pyi"))}
    assert "_ported/PROVENANCE.json" in dropped and {p for p in dropped if p.startswith("_ported/LICENSES/")}


def test_the_source_holds_nothing_kernel_builder_generates(tree):
    clashes = [p for p in source_set.source_files(tree, BUILD_TOML)
               if source_set.generated_by_kernel_builder(p, BUILD_TOML)]
    assert clashes == [], f"kernel-builder create-pyproject refuses to overwrite {clashes}"


def test_the_kernels_benchmark_files_and_only_the_tools_free_tests_reach_kernel_builder(tree):
    shipped = sorted(p for p in tree if p.startswith("benchmarks/"))
    assert shipped == sorted(f"benchmarks/{p.name}" for p in (REPO / "benchmarks").glob("*.py"))
    assert {"benchmarks/benchmark_grouped_matmul.py", "benchmarks/benchmark_attention.py",
            "benchmarks/benchmark_lm_loss.py"} <= set(shipped)
    assert not [p for p in tree if p.startswith("tools/")], "the harness (tools/bench) must not ship"
    local = read_tree(REPO / "build/benchmarks")
    assert {f"benchmarks/{rel}": data for rel, data in local.items()} == {p: tree[p] for p in shipped}, \
        "build/benchmarks and the Nix source's benchmarks/ differ"
    tests = [p for p in tree if p.startswith("tests/")]
    assert tests and all(p.startswith(f"{CI_TESTS}/") for p in tests)
    for path in tests:
        for node in ast.walk(ast.parse(tree[path])):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad = [n for n in names if n.split(".")[0] in ("tools", "tests")]
            assert not bad, f"{path} imports {bad}, which kernel-builder's ci-test source does not hold"


def _decorator_names_its_op(decorator: ast.expr) -> bool:
    """kernel-builder's torch-ops-check: a torch.library decorator call must name its op via add_op_namespace_prefix."""
    if not (isinstance(decorator, ast.Call) and decorator.args):
        return True
    func = decorator.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("custom_op", "triton_op", "register_kernel", "register_fake", "register_vmap",
                      "register_torch_dispatch"):
        return True
    first = decorator.args[0]
    if not isinstance(first, ast.Call):
        return False
    inner = first.func
    return (inner.id if isinstance(inner, ast.Name) else getattr(inner, "attr", None)) == "add_op_namespace_prefix"


def test_torch_library_registrations_pass_kernel_builders_ops_check(tree):
    bad = []
    for path in sorted(source_set.source_files(tree, BUILD_TOML)):
        if path.endswith(".py"):
            for node in ast.parse(tree[path]).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    bad += [f"{path}:{node.lineno} {node.name}" for d in node.decorator_list
                            if not _decorator_names_its_op(d)]
    assert bad == [], f"torch.library decorators without add_op_namespace_prefix: {bad}"


def test_the_ops_check_tells_a_bare_op_name_from_a_prefixed_one():
    def decorator(source: str) -> ast.expr:
        return ast.parse(f"@{source}\ndef f(x): ...").body[0].decorator_list[0]

    assert not _decorator_names_its_op(decorator('torch.library.custom_op("ns::f", mutates_args=())'))
    assert _decorator_names_its_op(decorator('torch.library.custom_op(add_op_namespace_prefix("f"), mutates_args=())'))
    assert _decorator_names_its_op(decorator("functools.cache"))
