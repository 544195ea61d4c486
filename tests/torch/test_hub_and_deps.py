"""Loading as the Hub's users do: a consumer kernel through get_kernel_dep, and the offline Hub cache.

The consumer (tests/torch/consumer) is built here like the real kernel (tools/bundle's layout),
with `kernel-depends = [{ repo-id = "kernels-community/tokamax", version = 1 }]`. The Hub cache is
laid out as huggingface_hub lays it: refs/v1 naming a commit, the files under snapshots/<commit>.
Each load runs in a fresh interpreter (tests/torch/kernel_loader.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernels._rust import KernelDependency, KernelLock, KernelLocks, KernelVersion, Metadata

from tests.conftest import REPO, VARIANT
from tools.bundle.layout import lay_out

CONSUMER = REPO / "tests/torch/consumer"
LOADER = REPO / "tests/torch/kernel_loader.py"
REPO_DIR = "kernels--kernels-community--tokamax"  # huggingface_hub's folder for a kernel repo


def _run(*args: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("LOCAL_KERNELS", "PYTHONPATH")}
    environ.update(env, TORCH_DEVICE_BACKEND_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, str(LOADER), *args], capture_output=True, text=True, env=environ)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def our_id() -> str:
    return Metadata.read_from_file(VARIANT / "metadata.json").id


@pytest.fixture(scope="module")
def consumer_variant(tmp_path_factory) -> Path:
    return lay_out(CONSUMER, tmp_path_factory.mktemp("consumer-build"))


def test_consumer_metadata_declares_the_dependency(consumer_variant):
    deps = Metadata.read_from_file(consumer_variant / "metadata.json").kernel_depends
    assert [(d.repo_id, d.version.version) for d in deps] == [("kernels-community/tokamax", 1)]


def test_consumer_gets_tokamax_with_get_kernel_dep_and_runs_gmm(consumer_variant, our_id):
    overrides = f"kernels-test/tokamax-consumer={consumer_variant}:kernels-community/tokamax={VARIANT}"
    report = _run("consumer", LOCAL_KERNELS=overrides)
    assert report["tokamax"] == our_id and report["consumer"].startswith("_tokamax_consumer_tpu_")
    assert report["max_err"] < 1e-3  # f32, k=128: summation order only


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> dict:
    """A cache with two commits of the kernel; refs/v1 names the newer one."""
    cache = tmp_path_factory.mktemp("hub-cache")
    repo = cache / REPO_DIR
    commits = {}
    for label in ("older", "newer"):
        commit = hashlib.sha1(label.encode() + (VARIANT / "metadata.json").read_bytes()).hexdigest()
        shutil.copytree(VARIANT, repo / "snapshots" / commit / "build/torch-tpu")
        commits[label] = commit
    (repo / "refs").mkdir()
    (repo / "refs/v1").write_text(commits["newer"])
    return {"cache": str(cache), **commits}


def _offline(hub_cache: dict) -> dict:
    return {"HF_HUB_CACHE": hub_cache["cache"], "KERNELS_CACHE": hub_cache["cache"], "HF_HUB_OFFLINE": "1"}


def test_offline_hub_rejects_the_tpu_variant_on_this_cpu_host(hub_cache):
    report = _run("hub", **_offline(hub_cache))
    assert not report["loaded"]
    error = report["error"]
    assert hub_cache["newer"] in error, "kernels must have found the commit refs/v1 names"
    assert "torch-tpu" in error and "cpu" in error.lower(), f"not rejected for the backend: {error}"


def test_offline_hub_loads_on_a_tpu_host(hub_cache, our_id):
    report = _run("hub", "--tpu-host", **_offline(hub_cache))
    assert report["loaded"], report.get("error")
    assert report["name"] == our_id and f"/snapshots/{hub_cache['newer']}/" in report["file"]


def test_a_consumer_lock_pins_the_commit_it_names(hub_cache, tmp_path, our_id):
    dependency = KernelDependency(repo_id="kernels-community/tokamax", version=KernelVersion.Version(1))
    lock = tmp_path / "kernels.lock"
    lock.write_text(KernelLocks(locks={dependency: KernelLock(hub_cache["older"])}).to_json() + "\n")
    report = _run("hub", "--tpu-host", "--lockfile", str(lock), **_offline(hub_cache))
    assert report["loaded"], report.get("error")
    assert f"/snapshots/{hub_cache['older']}/" in report["file"]
