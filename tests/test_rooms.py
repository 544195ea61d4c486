"""Our package's rooms (its folders and top-level modules) import downwards only, and no module of ours imports one
that imports it back, counting imports inside functions and `importlib.import_module` of a relative name too.

Read from the source (nothing is imported): `from .x import y`, `from .. import y`, and
`importlib.import_module("..x.y", __package__)`. `from pkg import member` depends on `member` (a module) or on
`pkg` (a name its `__init__` defines). The generated `_ported/` is upstream's and not ours.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.kernels_ci

PACKAGE = REPO / "torch-ext/tokamax"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[0] == "_ported":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolved(package: list[str], level: int, name: str) -> list[str]:
    return package[:len(package) - (level - 1)] + [p for p in name.split(".") if p]


def _known(dotted: list[str]) -> str | None:
    """The module `dotted` names, or the nearest package above it (a name inside a module is that module)."""
    while dotted and ".".join(dotted) not in MODULES:
        dotted = dotted[:-1]
    return ".".join(dotted) if dotted else None


def _imports(module: str) -> Iterator[tuple[str, int]]:
    """(module of ours it imports, line) for each import in `module`'s source, wherever it stands."""
    path = MODULES[module]
    package = list(path.relative_to(PACKAGE).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = _resolved(package, node.level, node.module or "")
            members = [".".join([*base, a.name]) for a in node.names]
            named = [m for m in members if m in MODULES]
            if len(named) < len(members):  # some names are the package's own
                target = _known(base)
                if target is not None:
                    yield target, node.lineno
            yield from ((m, node.lineno) for m in named)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            relative = re.match(r"^(\.+)(.*)$", node.args[0].value)
            if relative:
                target = _known(_resolved(package, len(relative.group(1)), relative.group(2)))
                if target is not None:
                    yield target, node.lineno


EDGES = {m: {(t, line) for t, line in _imports(m) if t != m and not t.startswith("_ported")} for m in MODULES}


def _room(module: str) -> str:
    return module.split(".")[0] if module else "__init__"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _where(members: set[str], of: Callable[[str], str]) -> list[str]:
    return sorted(f"{MODULES[m].relative_to(REPO)}:{line} imports {t}" for m in MODULES if of(m) in members
                  for t, line in EDGES[m] if of(t) in members and of(t) != of(m))


def test_the_reader_sees_the_imports_it_is_meant_to():
    """Each kind of import the rules are about is read (else the tests below would pass on nothing)."""
    targets = {m: {t for t, _ in EDGES[m]} for m in MODULES}
    assert "tuning.active" in targets["torch_ops._tuned"]  # from ..tuning import active (a member module)
    assert "emulation" in targets["torch_ops._bridge"]  # from .. import emulation, ops
    assert "ops" in targets["tuning.tune"]  # importlib.import_module("..ops", __package__), inside a function
    assert "integrations.transformers.loss" in targets["integrations.transformers"]  # from .loss import ...
    assert len(MODULES) > 100


def test_rooms_import_downwards_only():
    rooms: dict[str, set[str]] = {}
    for m, targets in EDGES.items():
        rooms.setdefault(_room(m), set()).update(_room(t) for t, _ in targets if _room(t) != _room(m))
    cycles = _cycles(rooms)
    assert not cycles, "rooms that import each other: " + "; ".join(
        f"{' <-> '.join(c)} ({', '.join(_where(set(c), _room))})" for c in cycles)


def test_no_module_imports_one_that_imports_it_back():
    cycles = _cycles({m: {t for t, _ in targets} for m, targets in EDGES.items()})
    assert not cycles, "modules that import each other: " + "; ".join(
        f"{' <-> '.join(c)} ({', '.join(_where(set(c), lambda m: m))})" for c in cycles)
