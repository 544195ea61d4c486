"""The upstream side's outcomes, kept per machine while nothing they depend on changes.

Side "upstream" runs upstream's selected tests on tokamax 0.0.17 itself: the reference the port is held
to, a pure function of the upstream venv (named by its pins), the pinned sdist's files, this package's
files (selection, wrappers, plugin, runner) and the environment JAX reads. Its outcome files are kept in
the reference cache (TOKAMAX_REFERENCES, default kernels-community-tokamax/references in the user's cache
folder; `TOKAMAX_REFERENCES=off` runs the side every time) under a hash of all of those, written whole
(a folder renamed into place) or not at all, and copied back instead of running the side again. The port
side, the code under test, always runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENVIRONMENT = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_ENABLE_X64")  # what JAX reads that could change a result


def cache_dir() -> Path | None:
    """The reference cache, or None when TOKAMAX_REFERENCES=off (tests/upstream_reference.py shares it)."""
    setting = os.environ.get("TOKAMAX_REFERENCES", "")
    if setting == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernels-community-tokamax/references"


def venv_of(python: str) -> str:
    """The venv folder `python` runs in, resolved: named by its pins (scripts/env.sh). Not the interpreter's
    own real path, which is the base Python every venv of that version links to."""
    return os.path.realpath(Path(python).parent.parent)


def key(python: str, upstream_files: dict[str, bytes], everything: bool) -> str:
    """The hash of everything side "upstream" depends on."""
    digest = hashlib.sha256()

    def add(*parts: str | bytes) -> None:
        for part in parts:
            digest.update((part.encode() if isinstance(part, str) else part) + b"\0")

    add(venv_of(python), "all" if everything else "ci")
    for rel in sorted(upstream_files):
        add(rel, hashlib.sha256(upstream_files[rel]).digest())
    for path in sorted(p for p in HERE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        add(str(path.relative_to(HERE)), path.read_bytes())
    add(*(f"{name}={os.environ.get(name, '')}" for name in ENVIRONMENT))
    return digest.hexdigest()[:24]


def restore(cache: Path, digest: str, out_dir: Path) -> Path | None:
    """Copies a kept run's outcome files into `out_dir`; the entry's folder, or None if there is none."""
    entry = cache / f"suite-upstream-{digest}"
    if not (entry / "complete").is_file():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in entry.iterdir():
        if path.name != "complete":
            shutil.copy2(path, out_dir / path.name)
    return entry


def store(cache: Path, digest: str, out_dir: Path, name: str) -> None:
    """Keeps side `name`'s outcome files from `out_dir`, whole or not at all."""
    entry = cache / f"suite-upstream-{digest}"
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=cache, prefix=f".{entry.name}."))
    try:
        for path in out_dir.iterdir():
            if path.name.startswith(name) and path.is_file():
                shutil.copy2(path, scratch / path.name)
        (scratch / "complete").write_text("")
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(scratch, entry)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
