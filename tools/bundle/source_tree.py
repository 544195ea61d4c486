"""The kernel source a Nix build hands kernel-builder as `path`: `python -m tools.bundle.source_tree OUT`.

flake.nix runs this inside its port derivation, right after the port, and gives kernel-builder
the result. The tree holds what kernel-builder reads and nothing else of this repository:
`build.toml`, `CARD.md`, `kernels.lock`, the package under `torch-ext/` with the ported tree
just generated, and the tests kernel-builder's `ci-test` runs (`tests/kernel`: they need only the
built kernel, never `tools/`), and `benchmarks/`, which kernel-builder ships in the bundle beside
the variants, where `kernels benchmark` runs its `benchmark*.py` (the local measurement harness
lives in tools/bench/ and never reaches a build).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from ..porter.tree import read_tree

ROOT_FILES = ("build.toml", "CARD.md", "kernels.lock")
CI_TESTS = "tests/kernel"
BENCHMARKS = "benchmarks"


def source_tree(repo: Path) -> dict[str, bytes]:
    """The files of the tree kernel-builder gets, by path; the port must have run in `repo`."""
    name = tomllib.loads((repo / "build.toml").read_text())["general"]["name"].replace("-", "_")
    package = repo / "torch-ext" / name
    if not (package / "_ported" / "PROVENANCE.json").is_file():
        raise ValueError(f"{package / '_ported'} is missing or incomplete: run the port first")
    files = {rel: (repo / rel).read_bytes() for rel in ROOT_FILES}
    files.update({f"torch-ext/{name}/{rel}": data for rel, data in read_tree(package).items()})
    files.update({f"{CI_TESTS}/{rel}": data for rel, data in read_tree(repo / CI_TESTS).items()})
    files.update({f"{BENCHMARKS}/{rel}": data for rel, data in benchmark_files(repo).items()})
    return files


def benchmark_files(repo: Path) -> dict[str, bytes]:
    """`benchmarks/` as kernel-builder ships it: the `kernels benchmark` files and their helper."""
    return {rel: data for rel, data in read_tree(repo / BENCHMARKS).items() if rel.endswith(".py") and "/" not in rel}


def write(files: dict[str, bytes], out: Path) -> None:
    """Writes `files` under `out`, which must not exist yet (in a Nix build it is `$out`)."""
    out.mkdir(parents=True)
    for rel, data in sorted(files.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)


def main(argv: list[str]) -> int:
    """Writes the tree of the repository this module lives in to argv[0]."""
    if len(argv) != 1:
        print("usage: python -m tools.bundle.source_tree OUT", file=sys.stderr)
        return 2
    try:
        write(source_tree(Path(__file__).resolve().parents[2]), Path(argv[0]))
    except (ValueError, OSError) as e:
        print(f"source_tree: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
