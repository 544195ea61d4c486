"""Command line of the port: `python -m tools.porter [--check | --update-lock] ...`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .errors import PortError
from .port import build, check_lock, check_written, update_lock
from .tree import write_tree

REPO = Path(__file__).resolve().parents[2]


def _named_dirs(values: list[str]) -> dict[str, Path]:
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise PortError(f"expected NAME=DIR, got {value!r}")
        out[name] = Path(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.porter", description=__doc__)
    parser.add_argument("--recipe", type=Path, default=REPO / "tokamax/port/port.kdl")
    parser.add_argument("--lock", type=Path, default=REPO / "tokamax/port/port.lock.json")
    parser.add_argument("--out", type=Path, default=REPO / "torch-ext/tokamax/_ported")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache/artifacts",
                        help="where pip-downloaded artifacts are kept (default: %(default)s)")
    parser.add_argument("--dir", action="append", default=[], metavar="NAME=DIR",
                        help="use an unpacked copy of the source artifact NAME instead of fetching it")
    parser.add_argument("--vendor", action="append", default=[], metavar="NAME=DIR",
                        help="use an unpacked copy of the vendored artifact NAME instead of fetching it")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="regenerate in memory and compare with the lock and the tree on disk; write nothing")
    mode.add_argument("--update-lock", action="store_true", help="pin the tree this recipe gives, then write it")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        result = build(args.recipe, args.cache, _named_dirs(args.dir + args.vendor))
        if args.update_lock:
            update_lock(result, args.lock)
        check_lock(result, args.lock)
        if args.check:
            diffs = check_written(result, args.out)
            if diffs:
                raise PortError(f"{args.out} differs from what the recipe gives:\n  " + "\n  ".join(diffs))
        else:
            write_tree(result.tree, args.out)
    except PortError as e:
        print(f"port: error: {e}", file=sys.stderr)
        return 1
    verb = "checked" if args.check else "wrote"
    print(f"port: {verb} {args.out} ({result.provenance['files']} files, {result.digest}) "
          f"in {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
