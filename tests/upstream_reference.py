"""Upstream's side of a comparison, computed once per machine for what it depends on.

An upstream-side script runs in the upstream venv (tokamax 0.0.17 as pip installed it from its pinned
release) and writes a JSON report: upstream's lowerings, bodies or errors for the cases the tests compare
this kernel against. It is a pure function of that venv, its arguments' bytes and the repo's files it
imports, so its report is kept in a cache and reused while all of those are unchanged, as a build system
keeps an output while its inputs are: lowering upstream's side again at every run is most of what some
files cost (upstream's public calls: about 5 minutes on this host's two cores).

Where: TOKAMAX_REFERENCES (default: kernels-community-tokamax/references in the user's cache folder),
`TOKAMAX_REFERENCES=off` runs every script afresh. An entry is keyed by the upstream venv (its folder is named
by its pins), the script, the arguments' contents and the environment JAX reads; it records the hash of every
repo file the script imported and of each file in the script's folder, and is used only if each still hashes
the same and the folder holds no other file. It is written whole (a temporary file renamed) or not at all; the
code under test is never cached: every test lowers this kernel's side afresh and compares it with the report.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tools.upstream_suite.reference import ENVIRONMENT, cache_dir, venv_of

REPO = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).with_name("upstream_reference_runner.py")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(cache: Path, python: str, script: str, inputs: tuple[Path, ...]) -> Path:
    key = hashlib.sha256()
    for part in (venv_of(python), script, *map(_digest, inputs),
                 *(f"{name}={os.environ.get(name, '')}" for name in ENVIRONMENT)):
        key.update(part.encode() + b"\0")
    return cache / f"{Path(script).stem}-{key.hexdigest()[:24]}.json"


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix != ".pyc")


def _still_valid(record: dict) -> bool:
    return (all((REPO / rel).is_file() and _digest(REPO / rel) == digest for rel, digest in record["deps"].items())
            and _listing((REPO / record["script"]).parent) == record["folder"])


def run(python: str, script: str, out: Path, *inputs: Path) -> bool:
    """Writes `script`'s report (`python REPO/script INPUTS... OUT`) to `out`: from the cache if an entry's
    dependencies are unchanged, else by running it (and keeping the result). True if it came from the cache."""
    cache = cache_dir()
    entry = _entry(cache, python, script, inputs) if cache else None
    if entry is not None and entry.is_file():
        try:
            record = json.loads(entry.read_text())
            valid = _still_valid(record)
        except (OSError, ValueError, KeyError):
            valid = False
        if valid:
            out.write_text(record["report"])
            print(f"upstream reference: {script} reused from {entry}", file=sys.stderr)
            return True
    deps_file = out.with_name(out.name + ".deps.json")
    result = subprocess.run([python, str(RUNNER), str(deps_file), str(REPO), str(REPO / script), *map(str, inputs),
                             str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"{script} failed in the upstream venv:\n{result.stderr[-4000:]}"
    if entry is not None:
        folder = (REPO / script).parent
        deps = set(json.loads(deps_file.read_text())) | {str((folder / name).relative_to(REPO))
                                                         for name in _listing(folder)}
        record = {"script": script, "folder": _listing(folder),
                  "deps": {rel: _digest(REPO / rel) for rel in sorted(deps)}, "report": out.read_text()}
        entry.parent.mkdir(parents=True, exist_ok=True)
        scratch = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        scratch.write_text(json.dumps(record))
        os.replace(scratch, entry)
    return False
