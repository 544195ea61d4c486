"""Command line: `python -m tools.upstream_suite [--all]` (see the package docstring)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import venvs
from . import reference, sdist
from .compare import compare, evidence, load_deviations, render
from .run import read_side, run_side
from .sites import SuiteError, build_port_site, build_upstream_site, installed_package, load_selection

REPO = Path(__file__).resolve().parents[2]
SIDES = ("upstream", "port")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.upstream_suite", description=__doc__)
    parser.add_argument("--all", action="store_true", help="every file of [all] in selection.toml (about an hour)")
    parser.add_argument("--side", choices=SIDES, action="append",
                        help="run only this side and stop (./test.sh runs the two sides as parallel jobs, then "
                             "--compare); default: both sides, then the comparison")
    parser.add_argument("--compare", action="store_true",
                        help="only compare the outcomes the two --side runs left in --work")
    parser.add_argument("--variant", type=Path, default=REPO / "build/torch-tpu",
                        help="the built variant whose _ported tree is tested (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=REPO / "build/upstream-suite",
                        help="sites, logs and outcomes (default: %(default)s)")
    parser.add_argument("--upstream-python", help="python with upstream tokamax (default: the upstream venv)")
    parser.add_argument("--port-python", help="python for the port side (default: the upstream-suite venv)")
    args = parser.parse_args(argv)
    sides = [] if args.compare else (args.side or list(SIDES))
    results = args.work / "results"
    if not args.side:
        (args.work / "report.txt").unlink(missing_ok=True)  # a report is this run's or none
    try:
        upstream_files = sdist.upstream_package()
        selection = load_selection(upstream_files, everything=args.all)
        deviations = load_deviations()
        ini = sdist.pytest_ini()
        runs = {}
        cache = reference.cache_dir()
        for side in sides:
            if side == "upstream" and cache is not None:
                python = args.upstream_python or venvs.tier_python("upstream")
                digest = reference.key(python, upstream_files, args.all)
                entry = reference.restore(cache, digest, results)
                if entry is not None:
                    runs[side] = read_side(side, args.work / "upstream-site", results,
                                           wrappers=bool(selection.wrappers))
                    print(f"upstream suite, side upstream: {len(runs[side].outcomes)} cases reused from {entry} "
                          f"(they ran in {runs[side].seconds:.0f} s; nothing they depend on changed since; "
                          "TOKAMAX_REFERENCES=off runs them again)", flush=True)
                    continue
            if side == "port":
                python = args.port_python or venvs.tier_python("upstream-suite")
                site = build_port_site(args.variant / "_ported", upstream_files, selection, args.work / "port-site",
                                       ini)
            else:
                python = args.upstream_python or venvs.tier_python("upstream")
                site = build_upstream_site(installed_package(python), upstream_files, selection,
                                           args.work / "upstream-site", ini)
            print(f"upstream suite, side {side}: {len(selection.tests)} upstream test files or cases"
                  f"{' and ' + ', '.join(selection.wrappers) if selection.wrappers else ''}, "
                  f"tokamax {sdist.version()}" + (f" against {args.variant / '_ported'}" if side == "port" else ""),
                  flush=True)
            runs[side] = run_side(side, python, site, selection, results)
            finished = [results / f"{side}.xml", *([results / f"{side}-interpret.xml"] if selection.wrappers else [])]
            if side == "upstream" and cache is not None and all(f.is_file() for f in finished):  # pytest ended
                reference.store(cache, reference.key(python, upstream_files, args.all), results, side)
            print(f"upstream suite, side {side}: {len(runs[side].outcomes)} cases in {runs[side].seconds:.0f} s",
                  flush=True)
        if args.side:
            return 0
        for side in SIDES:
            if side not in runs:
                runs[side] = read_side(side, args.work / f"{side}-site", results, wrappers=bool(selection.wrappers))
    except (SuiteError, venvs.VenvError) as e:
        print(f"upstream suite: {e}", file=sys.stderr)
        return 2
    upstream, port = runs["upstream"], runs["port"]
    result = compare(upstream, port, deviations)
    report = render(result, upstream, port)
    report[4:4] = evidence(upstream, port, selection.evidence)
    (args.work / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    if not result.ok:
        print("upstream suite: FAILED (an upstream case that passes on upstream fails on the port, unlisted; "
              f"or nothing passed). Logs: {results}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
