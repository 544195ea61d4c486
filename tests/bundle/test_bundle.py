"""The bundle: build/torch-tpu laid out as kernel-builder's noarch build, and loading it as users do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from kernels._rust import Digest, DigestAlgorithm, Metadata

from tests.conftest import REPO, VARIANT
from tools.bundle.__main__ import import_check
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
    ops = variant["_ops.py"].decode()
    assert f'_OPS_NAME = "{metadata.id}"' in ops and "def add_op_namespace_prefix(op_name: str) -> str:" in ops
    assert (REPO / "build/CARD.md").read_bytes() == (REPO / "CARD.md").read_bytes()


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
    assert len(report["modules"]) == 20 and all(m.startswith(metadata.id + "._ported.") for m in report["modules"])
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
