"""Import rewriting on Python source, span by span, leaving every other byte as it was.

Working from the AST (not text search) means imports inside functions, multi-line
`from x import (...)` forms and aliases are all found, and strings or comments that merely
mention a module are not touched.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

from .errors import PortError

ImportNode = ast.Import | ast.ImportFrom
_FROM_HEAD = re.compile(rb"from\s+[\w.]+(\s+import\b)")


def _parse(text: bytes, path: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as e:
        raise PortError(f"{path}:{e.lineno}: cannot parse: {e.msg}") from e


@functools.lru_cache(maxsize=1024)
def _import_nodes(text: bytes, path: str) -> tuple[ImportNode, ...]:
    nodes = [n for n in ast.walk(_parse(text, path)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return tuple(sorted(nodes, key=lambda n: (n.lineno, n.col_offset)))


def iter_imports(text: bytes, path: str) -> Iterator[ImportNode]:
    """Every import statement in the module, nested ones included, in source order."""
    yield from _import_nodes(text, path)


def imported_modules(node: ImportNode) -> list[str]:
    """Absolute module names an import statement names (none for relative imports)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""] if node.level == 0 else []


def names_module(name: str, module: str) -> bool:
    """True if `name` is `module` or one of its submodules."""
    return name == module or name.startswith(module + ".")


def _rewrite(text: bytes, path: str, fn: Callable[[ImportNode, bytes], bytes | None]) -> bytes:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for node in iter_imports(text, path):
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[operator]
        new = fn(node, text[begin:end])
        if new is not None:
            edits.append((begin, end, new))
    for begin, end, new in reversed(edits):
        text = text[:begin] + new + text[end:]
    return text


def _from_with_module(segment: bytes, module: str) -> bytes:
    return _FROM_HEAD.sub(lambda m: b"from " + module.encode() + m.group(1), segment, count=1)


def _single_alias(node: ast.Import, path: str) -> ast.alias:
    if len(node.names) != 1:
        raise PortError(f"{path}:{node.lineno}: split `import a, b` into one import per line before rewriting it")
    return node.names[0]


def remap_module(text: bytes, path: str, old: str, new: str) -> tuple[bytes, int]:
    """Renames module `old` (and its submodules) to `new` in every import; returns (text, count)."""
    if old.encode() not in text:  # cheap skip: parsing is most of the port's time
        return text, 0
    count = 0

    def fn(node: ImportNode, segment: bytes) -> bytes | None:
        nonlocal count
        if isinstance(node, ast.ImportFrom):
            if node.level or not names_module(node.module or "", old):
                return None
            count += 1
            return _from_with_module(segment, new + (node.module or "")[len(old):])
        if not any(names_module(a.name, old) for a in node.names):
            return None
        alias = _single_alias(node, path)
        if alias.name != old:
            raise PortError(f"{path}:{node.lineno}: cannot remap `import {alias.name}`; import {old} itself")
        count += 1
        if alias.asname is None and "." in old:
            raise PortError(f"{path}:{node.lineno}: `import {old}` binds `{old.split('.')[0]}`; add an alias")
        bound = alias.asname or old
        parent, _, last = new.rpartition(".")
        head = f"from {parent} import {last}" if parent else f"import {last}"
        return (head + (f" as {bound}" if bound != last else "")).encode()

    return _rewrite(text, path, fn), count


def _relative(module_parts: list[str], package_parts: list[str]) -> str:
    common = 0
    while common < min(len(module_parts), len(package_parts)) and module_parts[common] == package_parts[common]:
        common += 1
    return "." * (len(package_parts) - common + 1) + ".".join(module_parts[common:])


def relativize(text: bytes, path: str, package_root: str) -> tuple[bytes, int]:
    """Turns absolute imports of `package_root` into relative ones, for a file at tree path `path`.

    The tree's root is the package `package_root`; the kernel loader imports it under a
    hashed name, so no absolute import of it may remain.
    """
    if package_root.encode() not in text:
        return text, 0
    file = PurePosixPath(path)
    package = list(file.parent.parts)
    count = 0

    def fn(node: ImportNode, segment: bytes) -> bytes | None:
        nonlocal count
        if isinstance(node, ast.ImportFrom):
            if node.level or not names_module(node.module or "", package_root):
                return None
            count += 1
            parts = (node.module or "").split(".")[1:]
            return _from_with_module(segment, _relative(parts, package))
        if not any(names_module(a.name, package_root) for a in node.names):
            return None
        alias = _single_alias(node, path)
        parts = alias.name.split(".")[1:]
        if not parts or alias.asname is None:
            raise PortError(f"{path}:{node.lineno}: `import {alias.name}` cannot be made relative; use an alias")
        count += 1
        return f"from {_relative(parts[:-1], package)} import {parts[-1]} as {alias.asname}".encode()

    return _rewrite(text, path, fn), count


def find_imports(text: bytes, path: str, module: str) -> list[int]:
    """Line numbers of absolute imports of `module` or its submodules."""
    if module.encode() not in text:
        return []
    return [n.lineno for n in iter_imports(text, path) if any(names_module(m, module) for m in imported_modules(n))]


def _top_level_name(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if type(node).__name__ == "TypeAlias":  # `type X = ...`, Python 3.12+
        return node.name.id  # type: ignore[attr-defined]
    return None


def keep_definitions(text: bytes, path: str, names: set[str]) -> bytes:
    """Keeps the docstring, the imports and the named top-level definitions; drops the rest.

    Whole lines are dropped (decorators included), so what is kept stays byte-identical.
    """
    tree = _parse(text, path)
    lines = text.splitlines(keepends=True)
    found: set[str] = set()
    drop: set[int] = set()
    for i, node in enumerate(tree.body):
        name = _top_level_name(node)
        keep = isinstance(node, (ast.Import, ast.ImportFrom)) or (i == 0 and isinstance(node, ast.Expr))
        if name in names:
            found.add(name)
            keep = True
        if not keep:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            drop.update(range(first - 1, node.end_lineno))  # type: ignore[arg-type]
    missing = sorted(names - found)
    if missing:
        raise PortError(f"{path}: no top-level definition of {missing}")
    return b"".join(line for i, line in enumerate(lines) if i not in drop)
