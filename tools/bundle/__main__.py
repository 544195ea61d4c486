"""`python -m tools.bundle`: port, lay out build/torch-tpu and CARD.md, then the import check."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..porter.__main__ import main as port_main
from ..porter.tree import write_tree
from .layout import lay_out
from .source_tree import benchmark_files

REPO = Path(__file__).resolve().parents[2]


def import_check(variant: Path) -> None:
    """Runs import_check.py in a fresh interpreter; raises SystemExit with its output on failure."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    env.pop("LOCAL_KERNELS", None)
    result = subprocess.run([sys.executable, "-I", str(Path(__file__).with_name("import_check.py")), str(variant)],
                            env=env, capture_output=True, text=True)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"bundle: the import check of {variant} failed (see the error above)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bundle", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "build")
    parser.add_argument("--skip-port", action="store_true", help="use the ported tree already on disk")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if not args.skip_port and port_main([]) != 0:
        return 1
    try:
        variant = lay_out(REPO, args.out)
    except ValueError as e:
        print(f"bundle: error: {e}", file=sys.stderr)
        return 1
    shutil.copyfile(REPO / "CARD.md", args.out / "CARD.md")
    write_tree(benchmark_files(REPO), args.out / "benchmarks")  # beside the variant, as kernel-builder's bundle
    import_check(variant)
    print(f"bundle: built {variant} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
