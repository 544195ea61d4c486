"""The bundle: build/torch-tpu laid out as kernel-builder's noarch build, and loading it as users do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest
from kernels._rust import Digest, DigestAlgorithm, Metadata

from tests.conftest import KERNEL_MODULES, REPO, VARIANT
from tools.bundle.__main__ import import_check
from tools.bundle.layout import metadata_document
from tools.porter.tree import read_tree

pytestmark = pytest.mark.kernels_ci

LOADER = REPO / "tests/bundle/load_kernel.py"


@pytest.fixture(scope="module")
def metadata() -> Metadata:
    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    return Metadata.read_from_file(VARIANT / "metadata.json")


def test_metadata_is_accepted_by_kernels(metadata):
    assert metadata.name.python_name == "tokamax" and metadata.version == 1
    assert str(metadata.backend.backend_type) in ("tpu", "TPU", "Backend.TPU")
    assert metadata.python_depends == [] and metadata.kernel_depends == []
    assert metadata.id.startswith("_tokamax_tpu_") and metadata.license == "Apache-2.0"


def test_digest_matches_the_files(metadata):
    files = read_tree(VARIANT)
    files.pop("metadata.json")
    scratch = REPO / "build/.digest-check"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        for rel, data in files.items():
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            (scratch / rel).write_bytes(data)
        metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_variant_is_a_flat_copy_plus_ops_and_metadata(metadata):
    package = read_tree(REPO / "torch-ext/tokamax")
    variant = read_tree(VARIANT)
    assert set(variant) - set(package) == {"_ops.py", "metadata.json"}
    assert all(variant[p] == data for p, data in package.items())
    assert (REPO / "build/CARD.md").read_bytes() == (REPO / "CARD.md").read_bytes()


def test_metadata_has_kernel_builders_fields_in_its_order():
    document = json.loads((VARIANT / "metadata.json").read_text())
    assert list(document) == ["name", "id", "version", "license", "upstream", "python-depends", "kernel-depends",
                              "backend", "digest"]
    assert document["backend"] == {"type": "tpu"}
    # A kernel whose build.toml sets no upstream gets no `upstream` key (kernel-builder omits it, never null).
    consumer = metadata_document(REPO / "tests/torch/consumer", "_tokamax_consumer_tpu_0")
    assert "upstream" not in consumer and "source" not in consumer and None not in consumer.values()


def _ops_module(monkeypatch, *, tpu: bool = False, cuda: str | None = None) -> dict:
    """Runs build/torch-tpu/_ops.py against a stand-in torch in the given state; returns its globals."""
    backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False))
    if tpu:
        backends.tpu = types.ModuleType("torch.backends.tpu")
    torch = types.ModuleType("torch")
    torch.backends, torch.version = backends, types.SimpleNamespace(cuda=cuda, hip=None)
    torch.ops = _OpNamespaces()
    monkeypatch.setitem(sys.modules, "torch", torch)
    namespace: dict = {}
    exec(compile((VARIANT / "_ops.py").read_text(), "_ops.py", "exec"), namespace)
    return namespace


class _OpNamespaces:
    """Stands for `torch.ops`: any namespace, named by a string."""

    def __getattr__(self, name: str) -> str:
        return f"torch.ops.{name}"


@pytest.mark.parametrize(("state", "backend"), [({"tpu": True}, "tpu"), ({}, "cpu"), ({"cuda": "12.8"}, "cuda")])
def test_ops_module_names_the_backend_it_runs_on_as_kernel_builders_does(metadata, monkeypatch, state, backend):
    ops = _ops_module(monkeypatch, **state)
    build_id = metadata.id.removeprefix("_tokamax_tpu_")
    namespace = f"_tokamax_{backend}_{build_id}"
    assert ops["get_backend"]() == backend and ops["_OPS_NAME"] == namespace
    assert ops["ops"] == f"torch.ops.{namespace}" and ops["add_op_namespace_prefix"]("gmm") == f"{namespace}::gmm"


def _load(mode: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "PYTHONPATH")}
    environ.update(env, PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, str(LOADER), mode, str(VARIANT)], capture_output=True, text=True,
                            env=environ)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("mode", ["get_local_kernel", "get_kernel"])
def test_kernel_loads_under_its_own_id_and_nothing_named_tokamax_leaks(mode, metadata):
    report = _load(mode, LOCAL_KERNELS=f"kernels-community/tokamax={VARIANT}")
    assert report["name"] == metadata.id
    assert report["version"] == "1.0.0" and report["tokamax_version"] == "0.0.17"
    assert len(report["modules"]) == len(KERNEL_MODULES)
    assert all(m.startswith(metadata.id + "._ported.") for m in report["modules"])
    assert report["tokamax_modules"] == [] and report["dropped_loaded"] == []


def test_loading_imports_no_kernel_module_until_first_use(metadata):
    report = _load("lazy", LOCAL_KERNELS=f"kernels-community/tokamax={VARIANT}")
    assert report["kernel_modules_loaded"] == [] and report["jax_loaded"] is False


def test_a_failing_import_check_fails_the_build_with_the_error(tmp_path):
    broken = tmp_path / "torch-tpu"
    shutil.copytree(VARIANT, broken)
    with (broken / "_ported/_src/precision.py").open("a") as f:
        f.write("\nimport pydantic\n")
    with pytest.raises(SystemExit, match="import check of .* failed"):
        import_check(broken)
