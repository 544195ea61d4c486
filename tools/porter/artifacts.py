"""Fetches pinned release artifacts with pip, checks their sha256, reads them safely.

Artifacts are named by package, version and kind (sdist or wheel) only; pip finds them on
whatever index it is configured for. Nothing is unpacked before its hash matches the recipe,
and archive members are read into memory through `tarfile`'s data filter (zip members through
the same rules), so a hostile member cannot land outside the tree.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from .errors import PortError
from .recipe import Step


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_artifact(path: Path, package: str, version: str, dist: str) -> bool:
    try:
        if dist == "sdist":
            name, ver = parse_sdist_filename(path.name)
        else:
            name, ver, *_ = parse_wheel_filename(path.name)
    except Exception:  # not a file name of that kind
        return False
    return name == canonicalize_name(package) and ver == Version(version)


def _find(directory: Path, package: str, version: str, dist: str) -> Path | None:
    if not directory.is_dir():
        return None
    hits = sorted(p for p in directory.iterdir() if p.is_file() and _is_artifact(p, package, version, dist))
    return hits[0] if hits else None


def _pip_download(package: str, version: str, dist: str, dest: Path) -> None:
    kind = ["--no-binary", package] if dist == "sdist" else ["--only-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *kind, "--dest", str(dest),
           f"{package}=={version}"]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise PortError(f"pip could not download {package}=={version} ({dist}):\n{result.stderr.strip()}")


def fetch(step: Step, cache: Path) -> Path:
    """Returns the cached artifact of a `source`/`vendor` step, downloading it if absent.

    The file's sha256 must equal the step's `sha256`; a mismatch (a tampered or corrupted
    cache, or a re-uploaded release) fails and names both hashes.
    """
    package, version, dist, want = (step.props[k] for k in ("package", "version", "dist", "sha256"))
    path = _find(cache, package, version, dist)
    if path is None:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            _pip_download(package, version, dist, Path(tmp))
            got = _find(Path(tmp), package, version, dist)
            if got is None:
                raise PortError(f"pip downloaded no {dist} of {package}=={version} into {tmp}")
            path = cache / got.name
            _verify(step, got)
            os.replace(got, path)
    _verify(step, path)
    return path


def _verify(step: Step, path: Path) -> None:
    have = sha256_file(path)
    if have != step.props["sha256"]:
        raise PortError(
            f"{step.where()}: artifact {path} has sha256 {have}, the recipe pins {step.props['sha256']}; "
            "refusing to unpack it (delete the file to fetch it again if the cache is stale)"
        )


def _member_path(name: str, artifact: Path) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or name.startswith("/"):
        raise PortError(f"{artifact.name}: archive member {name!r} would land outside the target")
    return path


def _read_sdist(path: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(path, "r:*") as tar:
        for member in tar.getmembers():
            try:
                member = tarfile.data_filter(member, "/nonexistent-root")
            except tarfile.FilterError as e:
                raise PortError(f"{path.name}: archive member {member.name!r} rejected: {e}") from e
            if not member.isfile():
                continue
            rel = _member_path(member.name, path)
            extracted = tar.extractfile(member)
            assert extracted is not None
            files[rel.as_posix()] = extracted.read()
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) != 1 or any("/" not in name for name in files):
        raise PortError(f"{path.name}: an sdist must hold exactly one top-level folder, found {sorted(tops)}")
    return {name.split("/", 1)[1]: data for name, data in files.items()}


def _read_wheel(path: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            rel = _member_path(info.filename, path)
            if not info.is_dir():
                files[rel.as_posix()] = wheel.read(info)
    return files


def read_artifact(path: Path, dist: str) -> dict[str, bytes]:
    """The artifact's files, keyed by their path inside it (an sdist's top folder dropped)."""
    try:
        return _read_sdist(path) if dist == "sdist" else _read_wheel(path)
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as e:
        raise PortError(f"cannot read {path}: {e}") from e


def read_directory(root: Path) -> dict[str, bytes]:
    """An already-unpacked artifact (the `--dir`/`--vendor` offline mode), as `read_artifact` gives it."""
    if not root.is_dir():
        raise PortError(f"{root} is not a directory")
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files
