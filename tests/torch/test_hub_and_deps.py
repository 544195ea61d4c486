"""Loading as the Hub's users do: a consumer kernel through get_kernel_dep, and the offline Hub cache.

The consumer (tests/torch/consumer) is built here like the real kernel (tools/bundle's layout),
with `kernel-depends = [{ repo-id = "kernels-community/tokamax", version = 1 }]`. The Hub cache is
laid out as huggingface_hub lays it: refs/v1 naming a commit, the files under snapshots/<commit>.
Each load runs in a fresh interpreter (tests/torch/kernel_loader.py). The consumer's lock pins a
commit of that cache with its Nix hash; it is read as `kernels` and as kernel-builder's Nix lock
reader read it (tests/torch/nix/kernel_deps.nix, evaluated with Debian's nix-bin).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernels._rust import (
    KernelDependency,
    KernelLock,
    KernelLocks,
    KernelVersion,
    Metadata,
    NixKernelLock,
    NixKernelLocks,
)

from tests.conftest import REPO, VARIANT
from tests.nix_tools import FLAKES, nix_eval, nix_string, nix_tool
from tools.bundle.layout import lay_out

CONSUMER = REPO / "tests/torch/consumer"
LOADER = REPO / "tests/torch/kernel_loader.py"
REPO_DIR = "kernels--kernels-community--tokamax"  # huggingface_hub's folder for a kernel repo
KERNEL_DEPS_NIX = REPO / "tests/torch/nix/kernel_deps.nix"
TOKAMAX_V1 = KernelDependency(repo_id="kernels-community/tokamax", version=KernelVersion.Version(1))


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


def test_offline_hub_rejects_the_tpu_variant_on_a_host_without_a_tpu(hub_cache):
    """Without torch-tpu's backend entry (no TPU chips found), `kernels` takes the host for what its torch
    build says: "cpu" for a CPU-only build, "cuda" for the CUDA-linked build pip gives Python >= 3.12 (what a
    TPU VM has too, until torch-tpu finds its chips); either way the torch-tpu variant is rejected, naming it."""
    report = _run("hub", **_offline(hub_cache))
    assert not report["loaded"]
    error = report["error"]
    assert hub_cache["newer"] in error, "kernels must have found the commit refs/v1 names"
    backend = report["system_backend"]
    assert backend == ("cpu" if report["torch_cuda"] is None else "cuda"), report
    assert f"torch-tpu: backend (tpu) does not match system backend ({backend})" in error, error


def test_offline_hub_loads_on_a_tpu_host(hub_cache, our_id):
    report = _run("hub", "--tpu-host", **_offline(hub_cache))
    assert report["loaded"], report.get("error")
    assert report["name"] == our_id and f"/snapshots/{hub_cache['newer']}/" in report["file"]


@pytest.fixture(scope="module")
def consumer_lock(hub_cache, tmp_path_factory) -> Path:
    """The consumer's kernels.lock as kernel-builder's lock tools write it: tokamax v1 pinned to the
    older commit (`kernels lock`), with the NAR hash of that commit's snapshot (lock-hashes, which
    runs the same `nix hash path`)."""
    snapshot = Path(hub_cache["cache"]) / REPO_DIR / "snapshots" / hub_cache["older"]
    hashed = subprocess.run([nix_tool("nix"), *FLAKES, "hash", "path", "--type", "sha256", "--sri", str(snapshot)],
                            capture_output=True, text=True)
    assert hashed.returncode == 0, hashed.stderr
    locks = NixKernelLocks(locks={TOKAMAX_V1: NixKernelLock(hub_cache["older"], hashed.stdout.strip())})
    consumer = tmp_path_factory.mktemp("consumer-locked") / "consumer"
    shutil.copytree(CONSUMER, consumer)
    (consumer / "kernels.lock").write_text(locks.to_json() + "\n")
    return consumer / "kernels.lock"


def _read_with_kernel_builders_reader(lock: Path, hub_cache: dict):
    expression = (f"import {nix_string(str(KERNEL_DEPS_NIX))} "
                  f"{{ lockFile = {nix_string(str(lock))}; hubCache = {nix_string(hub_cache['cache'])}; }}")
    return nix_eval(expression)


def test_the_consumer_lock_is_read_by_kernels_and_by_kernel_builders_nix_reader(consumer_lock, hub_cache):
    locks = NixKernelLocks.from_json(consumer_lock.read_text())  # kernels' own type for Nix locks
    assert [(d, lock.commit) for d, lock in locks.items()] == [(TOKAMAX_V1, hub_cache["older"])]
    result = _read_with_kernel_builders_reader(consumer_lock, hub_cache)
    assert result.returncode == 0, result.stderr  # the hash is the snapshot's: Nix accepts the fetch
    [entry] = json.loads(result.stdout)
    assert entry["dependency"] == {"repo-id": "kernels-community/tokamax", "version": 1}
    assert entry["path"].startswith("/nix/store/") and entry["path"].endswith(hub_cache["older"])


def test_kernel_builders_nix_reader_refuses_a_hash_that_is_not_the_snapshots(consumer_lock, hub_cache, tmp_path):
    document = json.loads(consumer_lock.read_text())
    empty = "sha256-" + base64.b64encode(hashlib.sha256(b"").digest()).decode()  # a valid hash of other content
    document[0]["lock"]["hash"] = empty
    wrong = tmp_path / "kernels.lock"
    wrong.write_text(json.dumps(document))
    result = _read_with_kernel_builders_reader(wrong, hub_cache)
    assert result.returncode != 0 and "mismatch" in result.stderr, result.stderr


def test_kernels_loads_the_commit_the_consumer_lock_pins(consumer_lock, hub_cache, tmp_path, our_id):
    text = consumer_lock.read_text()
    # kernels 0.17.2 reads commit-only locks (`KernelLocks`, what `kernels lock` writes) and refuses the
    # Nix lock's `hash` there; load_kernel gets the same pin in that form.
    with pytest.raises(ValueError, match="unknown field `hash`"):
        KernelLocks.from_json(text)
    pins = {dep: KernelLock(lock.commit) for dep, lock in NixKernelLocks.from_json(text).items()}
    lock = tmp_path / "kernels.lock"
    lock.write_text(KernelLocks(locks=pins).to_json() + "\n")
    report = _run("hub", "--tpu-host", "--lockfile", str(lock), **_offline(hub_cache))
    assert report["loaded"], report.get("error")
    assert f"/snapshots/{hub_cache['older']}/" in report["file"]
