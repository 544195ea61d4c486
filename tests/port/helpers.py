"""Helpers for the port tests: unpacked artifact copies and recipe variants in tmp dirs."""

from __future__ import annotations

from pathlib import Path

from tools.porter import artifacts


def unpack(path: Path, dist: str, dest: Path) -> Path:
    """Writes an artifact's files (as the port reads them) under `dest`, for `--dir` runs."""
    for rel, data in artifacts.read_artifact(path, dist).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    """Replaces `old` (which must occur) by `new` in a file."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
