"""Repository hygiene: no upstream file is tracked, generated paths are ignored, no registry hosts."""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest

from tests.conftest import REPO
from tools.porter import artifacts

pytestmark = pytest.mark.kernels_ci

# Spelled in pieces so that this file does not match what it looks for.
UPSTREAM_HEADER = re.compile("Copyright 20" + r"\d\d Google LLC|The Toka" + "max Authors")
REGISTRY_HOSTS = re.compile("python" + "hosted|pypi" + r"\.org|files\.python" + "hosted")


def _tracked() -> list[str]:
    result = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [p for p in result.stdout.decode().split("\0") if p]


def test_no_tracked_file_is_or_resembles_an_upstream_file(artifact_paths):
    upstream = set()
    for path in artifact_paths.values():
        dist = "sdist" if path.name.endswith(".tar.gz") else "wheel"
        upstream |= {hashlib.sha256(d).digest() for d in artifacts.read_artifact(path, dist).values() if d.strip()}
    for rel in _tracked():
        data = (REPO / rel).read_bytes()
        assert hashlib.sha256(data).digest() not in upstream, f"{rel} is a copy of an upstream file"
        assert not UPSTREAM_HEADER.search(data.decode("utf-8", "replace")), f"{rel} carries an upstream header"


def test_no_registry_host_or_download_url_is_tracked():
    for rel in _tracked():
        text = (REPO / rel).read_text("utf-8", "replace")
        assert not REGISTRY_HOSTS.search(text), f"{rel} names a package registry host"


def test_generated_paths_are_ignored_and_untracked():
    tracked = _tracked()
    assert not [p for p in tracked if p.startswith(("torch-ext/tokamax/_ported/", "build/", ".cache/", ".venv/"))]
    probes = ["torch-ext/tokamax/_ported/ragged_dot.py", "build/torch-tpu/metadata.json", ".cache/artifacts/x.whl"]
    result = subprocess.run(["git", "check-ignore", *probes], cwd=REPO, capture_output=True, text=True)
    assert result.stdout.split() == probes
