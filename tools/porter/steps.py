"""The recipe ops, each a function from the in-memory tree to the next tree.

The tree maps tree-relative posix paths to bytes. Every op that names files must find them:
a glob that matches nothing, a pattern found a different number of times than the recipe
pins, or a guard that finds a forbidden import fails with the step, file and pattern, so
upstream drift stops the port instead of slipping through.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from . import imports, tables, typeparams
from .errors import PortError
from .globs import matches, split_patterns
from .recipe import Step

Tree = dict[str, bytes]
Artifacts = dict[str, dict[str, bytes]]


def _select(tree: Tree, step: Step, pattern: str, suffix: str = "") -> list[str]:
    hits = sorted(p for p in tree if matches(pattern, p) and p.endswith(suffix))
    if not hits:
        raise PortError(f"{step.where()}: `{pattern}` matches no file in the tree")
    return hits


def _subtree(files: dict[str, bytes], prefix: str, step: Step) -> dict[str, bytes]:
    prefix = prefix.strip("/")
    out = {p[len(prefix) + 1 :]: data for p, data in files.items() if p.startswith(prefix + "/")}
    if not out:
        raise PortError(f"{step.where()}: the artifact has no folder `{prefix}`")
    return out


def _license(files: dict[str, bytes], step: Step) -> dict[str, bytes]:
    if "license" not in step.props:
        return {}
    name = step.props["license"]
    if name not in files:
        raise PortError(f"{step.where()}: the artifact has no license file `{name}`")
    return {f"LICENSES/{step.props['package']}-{step.props['version']}.txt": files[name]}


def _add(tree: Tree, new: dict[str, bytes], step: Step) -> Tree:
    clash = sorted(tree.keys() & new.keys())
    if clash:
        raise PortError(f"{step.where()}: would overwrite {clash[:5]}; patch files with `replace` instead")
    return {**tree, **new}


def op_source(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    if step.index != 1:
        raise PortError(f"{step.where()}: `source` must be the first step")
    files = artifacts[step.props["package"]]
    return _add(_subtree(files, step.props["root"], step), _license(files, step), step)


def op_vendor(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    files = artifacts[step.props["package"]]
    to = step.props["to"].strip("/")
    new = {f"{to}/{p}": data for p, data in _subtree(files, step.props["from"], step).items()}
    return _add(tree, {**new, **_license(files, step)}, step)


def op_prune(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    keep: set[str] = set()
    for pattern in split_patterns(step.props["keep"]):
        keep.update(_select(tree, step, pattern))
    return {p: data for p, data in tree.items() if p in keep}


def op_delete(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    gone = set(_select(tree, step, step.props["in"]))
    return {p: data for p, data in tree.items() if p not in gone}


def op_move(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    src, dst = step.props["from"].strip("/"), step.props["to"].strip("/")
    moved = {p: dst + p[len(src) :] for p in tree if p == src or p.startswith(src + "/")}
    if not moved:
        raise PortError(f"{step.where()}: nothing at `{src}`")
    rest = {p: data for p, data in tree.items() if p not in moved}
    return _add(rest, {new: tree[old] for old, new in moved.items()}, step)


def op_overlay(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    root = recipe_dir / step.props["from"]
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    if not files:
        raise PortError(f"{step.where()}: overlay folder {root} holds no files")
    return _add(tree, files, step)


def op_replace(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    find, repl, want = step.props["find"].encode(), step.props["with"].encode(), step.props["count"]
    paths = _select(tree, step, step.props["in"])
    found = {p: tree[p].count(find) for p in paths}
    if sum(found.values()) != want:
        seen = ", ".join(f"{p}: {n}" for p, n in found.items())
        raise PortError(
            f"{step.where()}: pattern {step.props['find']!r} found {sum(found.values())} times, "
            f"the recipe pins {want} ({seen}); upstream changed, review the patch"
        )
    return {**tree, **{p: tree[p].replace(find, repl) for p, n in found.items() if n}}


def op_expect(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    paths = _select(tree, step, step.props["in"])
    hits: list[str] = []
    if "imports" in step.props:
        module = step.props["imports"]
        for p in (p for p in paths if p.endswith(".py")):
            hits += [f"{p}:{line}" for line in imports.find_imports(tree[p], p, module)]
        what = f"import of `{module}`"
    else:
        find = step.props["find"].encode()
        for p in paths:
            hits += [f"{p}:{i}" for i, line in enumerate(tree[p].splitlines(), 1) for _ in range(line.count(find))]
        what = f"pattern {step.props['find']!r}"
    if len(hits) != step.props["count"]:
        raise PortError(
            f"{step.where()}: expected {step.props['count']} {what}, found {len(hits)}"
            + (f" at {', '.join(hits[:20])}" if hits else "")
        )
    return tree


def op_keep_definitions(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    names = set(split_patterns(step.props["names"]))
    out = dict(tree)
    for p in _select(tree, step, step.props["in"], suffix=".py"):
        try:
            out[p] = imports.keep_definitions(tree[p], p, names)
        except PortError as e:
            raise PortError(f"{step.where()}: {e}") from e
    return out


def _rewrite_py(tree: Tree, step: Step, fn: Callable[[bytes, str], tuple[bytes, int]]) -> Tree:
    out = dict(tree)
    total = 0
    for p in _select(tree, step, step.props["in"], suffix=".py"):
        out[p], n = fn(tree[p], p)
        total += n
    if total == 0:
        raise PortError(f"{step.where()}: rewrote no import; upstream changed, review the recipe")
    return out


def op_remap_module(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    old, new = step.props["from"], step.props["to"]
    return _rewrite_py(tree, step, lambda text, p: imports.remap_module(text, p, old, new))


def op_relativize_imports(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    root = step.props["package_root"]
    return _rewrite_py(tree, step, lambda text, p: imports.relativize(text, p, root))


def op_strip_type_params(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    out = dict(tree)
    total = 0
    for p in _select(tree, step, step.props["in"], suffix=".py"):
        out[p], n = typeparams.strip_type_params(tree[p], p)
        total += n
    if total == 0:
        raise PortError(f"{step.where()}: found no PEP 695 syntax; upstream changed, review the recipe")
    return out


def op_compact_autotuning(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    out = dict(tree)
    for p in _select(tree, step, step.props["in"], suffix=".json"):
        try:
            out[p] = tables.compact(tree[p])
        except (ValueError, KeyError, TypeError) as e:
            raise PortError(f"{step.where()}: {p}: not an autotuning table as upstream writes them: {e}") from e
    return out


def op_ensure_init(tree: Tree, step: Step, artifacts: Artifacts, recipe_dir: Path) -> Tree:
    under = step.props["under"].strip("/")
    base = PurePosixPath(under) if under not in ("", ".") else PurePosixPath()
    dirs: set[PurePosixPath] = set()
    for p in tree:
        path = PurePosixPath(p)
        if path.suffix != ".py" or (base.parts and path.parts[: len(base.parts)] != base.parts):
            continue
        parent = path.parent
        while len(parent.parts) >= len(base.parts):
            dirs.add(parent)
            if parent == base:
                break
            parent = parent.parent
    new = {(d / "__init__.py").as_posix(): b"" for d in dirs}
    return {**new, **tree}


OPS: dict[str, Callable[[Tree, Step, Artifacts, Path], Tree]] = {
    name.removeprefix("op_"): fn for name, fn in globals().items() if name.startswith("op_")
}
