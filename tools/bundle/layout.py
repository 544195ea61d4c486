"""Lays out a kernel-builder noarch variant (`build/torch-tpu`) from `torch-ext/<name>/`.

Mirrors kernel-builder's noarch build: a flat copy of the package, a generated `_ops.py`
(ops_module.py) whose namespace carries this build's id, and a `metadata.json` with kernel-builder's
fields in its order and a digest of every file. On purpose, two things differ: the build id is a
content hash of the package (kernel-builder: the flake's git revision), and there is no
`provenance` (it names the kernel-builder that built the variant; `_ported/PROVENANCE.json`
records where the ported tree came from).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import tomllib
from pathlib import Path

from kernels._rust import Backend, Build, Digest, DigestAlgorithm, Metadata

from ..porter.tree import read_tree, write_tree
from .ops_module import ops_module

BACKEND = "tpu"
VARIANT = "torch-tpu"


def unique_id(files: dict[str, bytes]) -> str:
    """A content hash of the package: same files, same id; any change, another id."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()[:10]


def metadata_document(repo: Path, kernel_id: str) -> dict:
    """metadata.json's fields from build.toml, as kernel-builder writes them (order included).

    `upstream` and `source` appear only when build.toml sets them; build.toml is validated by the
    parser shipped in `kernels` first.
    """
    build = Build.open(repo)  # raises ValueError naming what is wrong
    general = tomllib.loads((repo / "build.toml").read_text())["general"]
    depends = [{"repo-id": d.repo_id, "version": d.version.version} for d in build.all_kernel_depends(Backend.TPU)]
    document = {"name": general["name"], "id": kernel_id, "version": general["version"], "license": general["license"]}
    document.update({key: general[key] for key in ("upstream", "source") if key in general})
    document.update({"python-depends": [], "kernel-depends": depends, "backend": {"type": BACKEND}})
    return document


def _digest(files: dict[str, bytes]) -> dict:
    """kernels' own digest of the variant's files (hashed from a scratch copy)."""
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(files, Path(tmp) / VARIANT)
        digest = Digest.hash_variant(DigestAlgorithm.SHA256, Path(tmp) / VARIANT)
    return {"algorithm": "sha256", "files": dict(sorted(digest.files.items()))}


def lay_out(repo: Path, out: Path) -> Path:
    """Writes `out/torch-tpu` (all or nothing) and returns its path."""
    name = tomllib.loads((repo / "build.toml").read_text())["general"]["name"].replace("-", "_")
    files = read_tree(repo / "torch-ext" / name)
    generated = sorted({"_ops.py", "metadata.json"} & files.keys())
    if generated:
        raise ValueError(f"torch-ext/{name} must not hold {generated}: the build generates them")
    build_id = unique_id(files)
    files["_ops.py"] = ops_module(name, build_id)
    document = metadata_document(repo, f"_{name}_{BACKEND}_{build_id}")
    document["digest"] = _digest(files)
    data = json.dumps(document, indent=2, ensure_ascii=False).encode()  # as kernel-builder: no final newline
    Metadata.from_bytes(data)  # the loader's own parser must accept what we write
    files["metadata.json"] = data
    variant = out / VARIANT
    write_tree(files, variant)
    return variant
