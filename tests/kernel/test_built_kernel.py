"""The built kernel, checked with nothing but `kernels`, pytest and the build: what kernel-builder's `ci-test` runs.

A Nix build copies `tests/kernel` into the kernel source it hands kernel-builder
(tools/bundle/source_tree.py), and `ci-test` runs `pytest tests -m kernels_ci` there with
LOCAL_KERNELS naming the built variant. Without LOCAL_KERNELS these tests load this checkout's
build/torch-tpu. They must not import `tools` or `tests`: neither is in that source.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import kernels
import pytest

REPO_ID = "kernels-community/tokamax"

pytestmark = pytest.mark.kernels_ci


def _variant() -> Path:
    """The variant directory LOCAL_KERNELS names for this kernel (ci-test sets it), else build/torch-tpu here."""
    for entry in os.environ.get("LOCAL_KERNELS", "").split(":"):
        repo_id, _, location = entry.partition("=")
        if repo_id == REPO_ID:
            path = Path(location)
            return path if (path / "metadata.json").is_file() else path / "torch-tpu"
    return Path(__file__).resolve().parents[2] / "build/torch-tpu"


@pytest.fixture(scope="module")
def metadata() -> dict:
    path = _variant() / "metadata.json"
    assert path.is_file(), f"no built variant at {path.parent} (./build.sh builds it; ci-test sets LOCAL_KERNELS)"
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def kernel(metadata):
    return kernels.get_local_kernel(_variant())


def test_kernel_loads_under_its_metadata_id(kernel, metadata):
    assert kernel.__name__ == metadata["id"] and metadata["id"].startswith("_tokamax_tpu_")
    assert kernel.__version__.split(".")[0] == str(metadata["version"])
    assert set(kernel.KERNEL_MODULES) <= set(kernel.__all__)


def test_every_ported_artifact_ships_its_license(kernel):
    ported = Path(kernel.__file__).parent / "_ported"
    artifacts = json.loads((ported / "PROVENANCE.json").read_text())["artifacts"]
    assert artifacts, "PROVENANCE.json names no artifact"
    for artifact in artifacts:
        license_file = ported / "LICENSES" / f"{artifact['package']}-{artifact['version']}.txt"
        assert license_file.is_file() and license_file.stat().st_size > 0, f"{license_file} is missing or empty"


def test_ops_namespace_names_the_backend_and_this_build(kernel, metadata):
    pytest.importorskip("torch", reason="the op namespace module (_ops.py) needs torch")
    ops = importlib.import_module(f"{kernel.__name__}._ops")
    build_id = metadata["id"].removeprefix("_tokamax_tpu_")
    assert ops._OPS_NAME == f"_tokamax_{ops.get_backend()}_{build_id}"
    assert ops.add_op_namespace_prefix("gmm") == f"{ops._OPS_NAME}::gmm"


def test_a_jax_kernel_module_imports(kernel):
    pytest.importorskip("jax", reason="the kernel modules need JAX")
    assert callable(kernel.ragged_dot.gmm)
