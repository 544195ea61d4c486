"""The generated tree's digest, provenance, pinned lock, and its all-or-nothing write."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .errors import PortError

PROVENANCE = "PROVENANCE.json"


def file_hashes(tree: dict[str, bytes]) -> dict[str, str]:
    """sha256 of every file but the provenance record, by path."""
    return {p: hashlib.sha256(tree[p]).hexdigest() for p in sorted(tree) if p != PROVENANCE}


def tree_digest(hashes: dict[str, str]) -> str:
    """One sha256 over the sorted (path, file hash) pairs."""
    lines = "".join(f"{h}  {p}\n" for p, h in sorted(hashes.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def read_lock(path: Path) -> dict | None:
    """The pinned lock, or None where there is none yet."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise PortError(f"{path}: not valid JSON: {e}") from e


def lock_document(hashes: dict[str, str]) -> dict:
    """What `--update-lock` writes: the digest and each file's hash, for naming what drifted."""
    return {"tree_digest": tree_digest(hashes), "files": hashes}


def dump_json(data: dict) -> bytes:
    """Stable JSON bytes: sorted keys, fixed indent, trailing newline."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def differences(want: dict[str, str], have: dict[str, str]) -> list[str]:
    """Human-readable lines naming every file that is missing, extra or changed."""
    out = [f"missing: {p}" for p in sorted(want.keys() - have.keys())]
    out += [f"unexpected: {p}" for p in sorted(have.keys() - want.keys())]
    out += [f"changed: {p}" for p in sorted(want.keys() & have.keys()) if want[p] != have[p]]
    return out


def read_tree(root: Path) -> dict[str, bytes]:
    """A written tree back into memory (`__pycache__` left out)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def write_tree(tree: dict[str, bytes], out: Path) -> None:
    """Writes `tree` to `out` atomically: a sibling temp dir, then one rename.

    If anything fails, the temp dir is removed and `out` is as it was before.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        for rel, data in sorted(tree.items()):
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(0o644)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
