"""Runs the selection on one site in one pytest process and reads back each case's outcome."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .sites import Selection, SuiteError

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"
PER_TEST_TIMEOUT_S = 600  # a stalled case fails alone instead of holding up the run


@dataclass(frozen=True)
class SideRun:
    """One side's outcomes: test id -> (outcome, reason), and which `tokamax` it imported."""

    name: str
    outcomes: dict[str, tuple[str, str]]
    tokamax: str | None
    seconds: float


def _merge(old: tuple[str, str] | None, new: tuple[str, str]) -> tuple[str, str]:
    """A case with subtests: any failure or error wins, then a pass, then a skip."""
    rank = {"failed": 3, "error": 3, "collection error": 3, "passed": 2, "skipped": 1}
    return new if old is None or rank[new[0]] > rank[old[0]] else old


def run_side(name: str, python: str, site: Path, selection: Selection, out_dir: Path) -> SideRun:
    """Runs `selection` in `site` with `python`; JUnit and outcomes land in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes_file, junit = out_dir / f"{name}.jsonl", out_dir / f"{name}.xml"
    for stale in (outcomes_file, Path(str(outcomes_file) + ".wrappers"), out_dir / f"{name}.seconds", junit,
                  out_dir / f"{name}-interpret.xml"):
        stale.unlink(missing_ok=True)
    (out_dir / f"{name}.site").write_text(f"{site}\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(site), str(PLUGIN_DIR)]),
               UPSTREAM_SUITE_OUTCOMES=str(outcomes_file))
    env.pop("PYTHONSTARTUP", None)
    targets = [f"tokamax/{t}" for t in selection.tests]
    wrapper_args = [f"wrappers/{w.removeprefix('wrappers/')}" for w in selection.wrappers]
    pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "upstream_suite_outcomes", "-q",
              "--continue-on-collection-errors", f"--timeout={PER_TEST_TIMEOUT_S}", f"--rootdir={site}"]
    start = time.monotonic()
    with open(out_dir / f"{name}.log", "w") as log:
        tests_select = ["-k", selection.select] if selection.select else []
        subprocess.run([*pytest, f"--junitxml={junit}", *tests_select, *targets], cwd=site, env=env, stdout=log,
                       stderr=subprocess.STDOUT)
        if wrapper_args:  # the interpret-mode wrappers, with their own -k, in a second process
            env["UPSTREAM_SUITE_OUTCOMES"] = str(outcomes_file) + ".wrappers"
            select = ["-k", selection.wrapper_select] if selection.wrapper_select else []
            subprocess.run([*pytest, f"--junitxml={out_dir / f'{name}-interpret.xml'}", *select, *wrapper_args],
                           cwd=site, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    (out_dir / f"{name}.seconds").write_text(f"{seconds:.1f}\n")
    return read_side(name, site, out_dir, wrappers=bool(wrapper_args))


def read_side(name: str, site: Path, out_dir: Path, wrappers: bool) -> SideRun:
    """One side's outcomes as `run_side` left them in `out_dir` (this run's, or an error). The tests must
    have imported `tokamax` from the site they ran in (`site`, or the one the run recorded: a run kept in the
    reference cache ran in another clone's site)."""
    recorded = out_dir / f"{name}.site"
    if recorded.is_file():
        site = Path(recorded.read_text().strip())
    outcomes_file = out_dir / f"{name}.jsonl"
    seconds_file = out_dir / f"{name}.seconds"
    if not seconds_file.exists():
        raise SuiteError(f"side {name} has not run (no {seconds_file}); run it with --side {name}")
    seconds = float(seconds_file.read_text())
    outcomes: dict[str, tuple[str, str]] = {}
    imported = []
    for path in (outcomes_file, Path(str(outcomes_file) + ".wrappers")):
        if not path.exists():
            if path == outcomes_file or wrappers:
                raise SuiteError(f"side {name}: pytest wrote no outcomes (see {out_dir / f'{name}.log'})")
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "tokamax" in record:
                imported.append(record["tokamax"])
            else:
                outcomes[record["id"]] = _merge(outcomes.get(record["id"]), (record["outcome"], record["reason"]))
    want = str(site / "tokamax" / "__init__.py")
    if any(i != want for i in imported):
        raise SuiteError(f"side {name}: the tests imported tokamax from {imported}, not {want}")
    return SideRun(name, outcomes, imported[0] if imported else None, seconds)
