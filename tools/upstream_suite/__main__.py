"""Command line: `python -m tools.upstream_suite [--all]` (see the package docstring)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import venvs
from . import sdist
from .compare import compare, evidence, load_deviations, render
from .run import run_side
from .sites import SuiteError, build_port_site, build_upstream_site, installed_package, load_selection

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.upstream_suite", description=__doc__)
    parser.add_argument("--all", action="store_true", help="every file of [all] in selection.toml (about an hour)")
    parser.add_argument("--variant", type=Path, default=REPO / "build/torch-tpu",
                        help="the built variant whose _ported tree is tested (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=REPO / "build/upstream-suite",
                        help="sites, logs and outcomes (default: %(default)s)")
    parser.add_argument("--upstream-python", help="python with upstream tokamax (default: the upstream venv)")
    parser.add_argument("--port-python", help="python for the port side (default: the upstream-suite venv)")
    args = parser.parse_args(argv)
    (args.work / "report.txt").unlink(missing_ok=True)  # a report is this run's or none
    try:
        upstream_files = sdist.upstream_package()
        selection = load_selection(upstream_files, everything=args.all)
        deviations = load_deviations()
        upstream_python = args.upstream_python or venvs.tier_python("upstream")
        port_python = args.port_python or venvs.tier_python("upstream-suite")
        ini = sdist.pytest_ini()
        port_site = build_port_site(args.variant / "_ported", upstream_files, selection, args.work / "port-site", ini)
        upstream_site = build_upstream_site(installed_package(upstream_python), upstream_files, selection,
                                            args.work / "upstream-site", ini)
        print(f"upstream suite: {len(selection.tests)} upstream test files or cases"
              f"{' and ' + ', '.join(selection.wrappers) if selection.wrappers else ''}, "
              f"tokamax {sdist.version()} against {args.variant / '_ported'}", flush=True)
        upstream = run_side("upstream", upstream_python, upstream_site, selection, args.work / "results")
        port = run_side("port", port_python, port_site, selection, args.work / "results")
    except (SuiteError, venvs.VenvError) as e:
        print(f"upstream suite: {e}", file=sys.stderr)
        return 2
    result = compare(upstream, port, deviations)
    report = render(result, upstream, port)
    report[4:4] = evidence(upstream, port, selection.evidence)
    (args.work / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    if not result.ok:
        print("upstream suite: FAILED (an upstream case that passes on upstream fails on the port, unlisted; "
              f"or nothing passed). Logs: {args.work / 'results'}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
