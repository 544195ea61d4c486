"""Bad inputs a user may give the public entry points, and the error each must get: one list per room
(`ragged.py`, ...), run by each tier's test (`tests/jax/test_errors.py`, `tests/torch/ops/test_errors.py`) and
rendered as docs/errors.md's table (`render`), so that the page says what the tests hold.

Only the standard library here: both tiers import it (the JAX tier has no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class BadInput:
    """One wrong call: `call(tokamax)` must raise `error` (a builtin exception's name) whose message holds
    `message` (plain text, not a pattern: the page shows it as it is)."""

    entry: str  # the public name a user calls, e.g. "tokamax.ops.ragged_dot"
    argument: str  # the argument that is wrong, as the message names it
    given: str  # what was given, in words
    error: str  # "ValueError", "TypeError", ...
    message: str  # a fragment the message must contain
    call: Callable[[ModuleType], Any]
    tier: str = "jax"  # "jax" (the JAX tier, no torch) or "torch"


COLUMNS = ("Entry point", "Argument", "Given", "Error", "Message holds")


def cases() -> list[BadInput]:
    """Every room's `CASES`, the modules of this package in name order (a new room's list joins by being here)."""
    import importlib
    import pkgutil

    out: list[BadInput] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            out += getattr(importlib.import_module(f"{__name__}.{info.name}"), "CASES", [])
    return out


def _cell(text: str, code: bool = False) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if code and "`" not in text else text


def render(cases: list[BadInput]) -> str:
    """docs/errors.md's table: one row per case, in the order given (Markdown, a trailing newline)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for c in cases:
        lines.append("| " + " | ".join([_cell(c.entry, True), _cell(c.argument, True), _cell(c.given),
                                         _cell(c.error, True), _cell(c.message)]) + " |")
    return "\n".join(lines) + "\n"
