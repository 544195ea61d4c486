"""The two trees the suite runs in, each a folder whose `tokamax/` holds the tests to run.

- port site: the built variant's ported tree as package `tokamax`, upstream's selected test files
  and listed helpers copied in from the sdist, upstream's namespace modules as shims (shims.py),
  and our interpret-mode wrappers beside it in `wrappers/`.
- upstream site: `tokamax/` links to upstream 0.0.17 as pip installed it in the upstream venv
  (whose test files must be the sdist's, byte for byte), with the same `wrappers/`.

A site is built in a scratch folder and renamed into place whole; a failed build leaves none.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import shims

HERE = Path(__file__).resolve().parent
WRAPPERS = HERE / "wrappers"


class SuiteError(Exception):
    """A site cannot be built as asked (a missing file, a helper that would overwrite the port)."""


@dataclass(frozen=True)
class Selection:
    """What runs: test files (or `file::Class::test` ids) with a -k expression, wrapper files and theirs."""

    tests: tuple[str, ...]
    wrappers: tuple[str, ...]
    wrapper_select: str
    test_only: tuple[str, ...]
    support: tuple[str, ...]
    namespaces: tuple[str, ...]
    evidence: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # fix -> id globs
    dropped: tuple[str, ...] = ()  # modules of op families the port drops: stubs that raise on use
    select: str = ""  # -k for `tests` ("" runs every case)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.split("::", 1)[0] for t in self.tests))


def load_selection(upstream: dict[str, bytes], *, everything: bool, path: Path = HERE / "selection.toml") -> Selection:
    """The CI selection, or with `everything` each sdist test file outside `[all].exclude`."""
    config = tomllib.loads(path.read_text())
    if everything:
        tests = tuple(sorted(rel for rel in upstream if rel.endswith("_test.py")
                             and not any(fnmatch.fnmatch(rel, g) for g in config["all"]["exclude"])))
        select = tests_select = ""
    else:
        tests, select = tuple(config["ci"]["files"]), config["ci"]["interpret_select"]
        tests_select = config["ci"].get("select", "")
    helpers = config["helpers"]
    selection = Selection(tests, tuple(config["ci"]["interpret"]), select, tuple(helpers["test_only"]),
                          tuple(helpers["support"]), tuple(helpers["namespaces"]),
                          {k: tuple(v) for k, v in config.get("evidence", {}).items()},
                          tuple(helpers.get("dropped", ())), tests_select)
    missing = [f for f in (*selection.files, *selection.test_only, *selection.support, *selection.namespaces,
                           *selection.dropped) if f not in upstream]
    if missing:
        raise SuiteError(f"{path.name} names files the pinned sdist does not hold: {missing}")
    return selection


def _replace_dir(build: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(build, dest)
    return dest


def _add_wrappers(site: Path, pytest_ini: str) -> None:
    """Our interpret-mode wrappers and upstream's pytest options (its markers) beside `tokamax/`."""
    shutil.copytree(WRAPPERS, site / "wrappers", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "pytest.ini").write_text(pytest_ini)


def build_port_site(ported: Path, upstream: dict[str, bytes], selection: Selection, dest: Path,
                    pytest_ini: str = "") -> Path:
    """The port site at `dest`: `ported` (a built variant's `_ported`) as `tokamax`, plus tests."""
    if not (ported / "_src").is_dir():
        raise SuiteError(f"{ported} is not a ported tree (no _src/): build the bundle first (./build.sh)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        package = build / "tokamax"
        shutil.copytree(ported, package, ignore=shutil.ignore_patterns("__pycache__"))
        (package / "__init__.py").unlink()  # the port's own (a docstring); upstream's shim replaces it
        for rel in (*selection.files, *selection.test_only, *selection.support):
            target = package / rel
            if target.exists():
                raise SuiteError(f"{rel}: listed as a test file or helper, but the port tree has it; "
                                 "the port site never overwrites a port file")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(upstream[rel])
        for rel in selection.dropped:
            target = package / rel
            if target.exists():
                raise SuiteError(f"{rel}: listed as a dropped module, but the port tree has it")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(shims.dropped_stub(rel))
        (package / "_shim.py").write_text(shims.HELPER)
        names = set(upstream)
        for rel in selection.namespaces:
            target = package / rel
            if target.exists():
                raise SuiteError(f"{rel}: upstream's namespace module would overwrite a port file")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(shims.shim_source(rel, upstream[rel].decode(), names))
        _add_wrappers(build, pytest_ini)
        return _replace_dir(build, dest)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def installed_package(python: str) -> Path:
    """Where `python` (the upstream venv's) imports upstream tokamax from."""
    # -P: the working directory (a temporary one, where anything may lie, e.g. a stray six.py) is not on the path
    result = subprocess.run([python, "-P", "-c", "import os, tokamax; print(os.path.dirname(tokamax.__file__))"],
                            capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        raise SuiteError(f"{python} cannot import upstream tokamax:\n{result.stderr.strip()}")
    return Path(result.stdout.strip())


def build_upstream_site(installed: Path, upstream: dict[str, bytes], selection: Selection, dest: Path,
                        pytest_ini: str = "") -> Path:
    """The upstream site at `dest`: a link to the installed package, whose tests match the sdist."""
    for rel in (*selection.files, *selection.test_only, *selection.support):
        have = installed / rel
        if not have.is_file() or have.read_bytes() != upstream[rel]:
            raise SuiteError(f"{have}: not the pinned sdist's {rel}; the upstream venv is not tokamax "
                             "as pinned (rebuild it: rm -rf \"$(readlink .venv/upstream)\")")
    dest.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        (build / "tokamax").symlink_to(installed, target_is_directory=True)
        _add_wrappers(build, pytest_ini)
        return _replace_dir(build, dest)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
