"""Rewrites PEP 695 generics (Python 3.12) into the typing-module spelling Python 3.11 reads.

The Torch tier runs on Python 3.11, but upstream's Op layer writes `class Op[**P, T](Base)`,
`def f[T](...)` and `type X = ...`. Each is rewritten in place, every other byte untouched:

- `class C[T, **P](Base)` -> `class C(Base, _typing_pep695.Generic[T, P])`, so `C[...]` still
  subscripts (Generic last, after any generic parent);
- `def f[T](...)` -> `def f(...)`;
- `type X = Y` -> `X = Y` (evaluated eagerly, as plain aliases are);
- the type parameters become module-level `TypeVar` / `ParamSpec` / `TypeVarTuple` objects,
  declared after the module's leading imports, since annotations still name them;
- `typing.override` (new in 3.12) is taken from `typing` where it exists, else it is the
  identity decorator it is at run time anyway.
"""

from __future__ import annotations

import ast

from .errors import PortError

_ALIAS = "_typing_pep695"
_NEW_IN_312 = {"override": f'override = getattr({_ALIAS}, "override", lambda f: f)'}


def _offsets(text: bytes) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _param_decl(param: ast.AST) -> tuple[str, str]:
    if isinstance(param, ast.TypeVar):
        return param.name, f'{param.name} = {_ALIAS}.TypeVar("{param.name}")'
    if isinstance(param, ast.ParamSpec):
        return param.name, f'{param.name} = {_ALIAS}.ParamSpec("{param.name}")'
    if isinstance(param, ast.TypeVarTuple):
        return param.name, f'{param.name} = {_ALIAS}.TypeVarTuple("{param.name}")'
    raise PortError(f"unknown type parameter node {type(param).__name__}")


def _generic_arg(param: ast.AST) -> str:
    return f"*{param.name}" if isinstance(param, ast.TypeVarTuple) else param.name  # type: ignore[attr-defined]


def _bracket_span(text: bytes, start: int, path: str, line: int) -> tuple[int, int]:
    """The `[...]` of type parameters: the first `[` at or after `start`, to its matching `]`."""
    begin = text.index(b"[", start)
    depth = 0
    for i in range(begin, len(text)):
        if text[i : i + 1] == b"[":
            depth += 1
        elif text[i : i + 1] == b"]":
            depth -= 1
            if depth == 0:
                return begin, i + 1
    raise PortError(f"{path}:{line}: unbalanced type parameter brackets")


def _insert_point(tree: ast.Module, starts: list[int]) -> int:
    """After the docstring and the leading run of imports: where the declarations go."""
    point = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]
        if is_doc or isinstance(node, (ast.Import, ast.ImportFrom)):
            point = starts[node.end_lineno]  # type: ignore[index]
            continue
        break
    return point


def _module_type_vars(tree: ast.Module) -> set[str]:
    """Names the module binds to `TypeVar(...)`, `ParamSpec(...)` or `TypeVarTuple(...)` itself."""
    kinds = ("TypeVar", "ParamSpec", "TypeVarTuple")
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            fn = node.value.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name in kinds:
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def strip_type_params(text: bytes, path: str) -> tuple[bytes, int]:
    """`text` with PEP 695 syntax rewritten; returns the new text and how many sites changed."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        raise PortError(f"{path}:{e.lineno}: cannot parse: {e.msg}") from e
    starts = _offsets(text)
    top_names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    top_names |= {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    declared = _module_type_vars(tree)  # `T = TypeVar("T")` already there: reused, not declared again
    top_names -= declared
    edits: list[tuple[int, int, bytes]] = []
    decls: dict[str, str] = {}

    def pos(line: int, col: int) -> int:
        return starts[line - 1] + col

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "typing" and node.level == 0:
            new = [a for a in node.names if a.name not in _NEW_IN_312]
            if len(new) == len(node.names):
                continue
            for a in node.names:
                if a.name in _NEW_IN_312:
                    if a.asname:
                        raise PortError(f"{path}:{node.lineno}: `typing.{a.name}` imported under another name")
                    decls[a.name] = _NEW_IN_312[a.name]
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in new)
            stmt = f"from typing import {names}" if new else "pass"
            edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset), stmt.encode()))  # type: ignore[arg-type]
            continue
        if isinstance(node, ast.TypeAlias):
            begin = pos(node.lineno, node.col_offset)
            name_end = pos(node.name.end_lineno, node.name.end_col_offset)  # type: ignore[arg-type]
            end = name_end
            for p in node.type_params:  # `type X[T] = Y` -> `X = Y`, T declared as for a class
                name, decl = _param_decl(p)
                if name not in declared:
                    if name in top_names:
                        raise PortError(f"{path}:{node.lineno}: type parameter `{name}` shadows a module-level name")
                    if decls.setdefault(name, decl) != decl:
                        raise PortError(f"{path}:{node.lineno}: type parameter `{name}` is declared with two kinds")
            if node.type_params:
                end = _bracket_span(text, name_end, path, node.lineno)[1]
            edits.append((begin, end, node.name.id.encode()))  # `type X` -> `X`
            continue
        params = getattr(node, "type_params", None)
        if not params or not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for p in params:
            name, decl = _param_decl(p)
            if name in declared:
                continue
            if name in top_names:
                raise PortError(f"{path}:{node.lineno}: type parameter `{name}` shadows a module-level name")
            if decls.setdefault(name, decl) != decl:
                raise PortError(f"{path}:{node.lineno}: type parameter `{name}` is declared with two kinds")
        head = pos(node.lineno, node.col_offset)
        name_at = text.index(node.name.encode(), head)
        begin, end = _bracket_span(text, name_at + len(node.name), path, node.lineno)
        edits.append((begin, end, b""))
        if isinstance(node, ast.ClassDef):
            generic = f"{_ALIAS}.Generic[{', '.join(_generic_arg(p) for p in params)}]"
            if node.bases:  # last, so that the MRO puts a generic parent before Generic
                last = node.bases[-1]
                at = pos(last.end_lineno, last.end_col_offset)  # type: ignore[arg-type]
                edits.append((at, at, f", {generic}".encode()))
            elif node.keywords:
                first = node.keywords[0]
                at = pos(first.lineno, first.col_offset)
                edits.append((at, at, f"{generic}, ".encode()))
            else:
                edits.append((end, end, f"({generic})".encode()))
    if not edits:
        return text, 0
    sites = len(edits)
    if decls:
        block = f"import typing as {_ALIAS}\n" + "\n".join(decls.values()) + "\n"
        point = _insert_point(tree, starts)
        edits.append((point, point, block.encode()))
    out = text
    for begin, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:begin] + new + out[end:]
    try:
        ast.parse(out, filename=path, feature_version=(3, 11))
    except SyntaxError as e:
        raise PortError(f"{path}:{e.lineno}: rewriting PEP 695 syntax left invalid Python 3.11: {e.msg}") from e
    return out, sites
