"""One port run: fetch and verify artifacts, apply the recipe, check the lock, write the tree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import artifacts as artifacts_lib
from . import tree as tree_lib
from .errors import PortError
from .recipe import Recipe, load_recipe
from .steps import OPS


@dataclasses.dataclass(frozen=True)
class PortResult:
    """What a run produced: the files, their digest and the provenance record."""

    tree: dict[str, bytes]
    digest: str
    provenance: dict


def _load_artifacts(recipe: Recipe, cache: Path, dirs: dict[str, Path]) -> tuple[dict, list[dict]]:
    names = {s.props["package"] for s in recipe.artifacts()}
    unknown = sorted(dirs.keys() - names)
    if unknown:
        raise PortError(f"--dir/--vendor name no artifact of the recipe: {unknown} (known: {sorted(names)})")
    files, records = {}, []
    for step in recipe.artifacts():
        package = step.props["package"]
        record = {k: step.props[k] for k in ("package", "version", "dist")}
        if package in dirs:
            files[package] = artifacts_lib.read_directory(dirs[package])
            record["sha256"] = None
            record["from_directory"] = True
        else:
            path = artifacts_lib.fetch(step, cache)
            files[package] = artifacts_lib.read_artifact(path, step.props["dist"])
            record["sha256"] = step.props["sha256"]
            record["file"] = path.name
        records.append(record)
    return files, records


def build(recipe_path: Path, cache: Path, dirs: dict[str, Path] | None = None) -> PortResult:
    """Runs the recipe in memory; writes nothing."""
    recipe = load_recipe(recipe_path)
    files, records = _load_artifacts(recipe, cache, dirs or {})
    tree: dict[str, bytes] = {}
    for step in recipe.steps:
        tree = OPS[step.op](tree, step, files, recipe.path.parent)
    hashes = tree_lib.file_hashes(tree)
    digest = tree_lib.tree_digest(hashes)
    provenance = {
        "recipe": recipe.path.name,
        "recipe_sha256": recipe.sha256,
        "artifacts": records,
        "tree_digest": digest,
        "files": len(hashes),
    }
    tree[tree_lib.PROVENANCE] = tree_lib.dump_json(provenance)
    return PortResult(tree=tree, digest=digest, provenance=provenance)


def check_lock(result: PortResult, lock_path: Path) -> None:
    """Fails unless the tree equals the pinned lock, naming every file that differs."""
    lock = tree_lib.read_lock(lock_path)
    if lock is None:
        raise PortError(f"no lock at {lock_path}; review the tree, then pin it with --update-lock")
    have = tree_lib.file_hashes(result.tree)
    diffs = tree_lib.differences(lock.get("files", {}), have)
    if diffs or lock.get("tree_digest") != result.digest:
        raise PortError(
            f"the ported tree ({result.digest}) differs from the pinned lock {lock_path} "
            f"({lock.get('tree_digest')}):\n  " + "\n  ".join(diffs or ["(digest only)"])
            + "\nIf the change is intended, review it and run the port with --update-lock."
        )


def update_lock(result: PortResult, lock_path: Path) -> None:
    """Pins the tree just built."""
    lock_path.write_bytes(tree_lib.dump_json(tree_lib.lock_document(tree_lib.file_hashes(result.tree))))


def check_written(result: PortResult, out: Path) -> list[str]:
    """Differences between the tree just built and the one on disk at `out`."""
    if not out.exists():
        return [f"missing: {out} (not generated yet)"]
    want = {p: tree_lib.file_hashes({p: d})[p] for p, d in result.tree.items() if p != tree_lib.PROVENANCE}
    have = tree_lib.file_hashes(tree_lib.read_tree(out))
    return tree_lib.differences(want, have)
