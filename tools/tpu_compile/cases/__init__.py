"""Every compile case, gathered from one module per op family (each defines `cases() -> list[Case]`)."""

from __future__ import annotations

import importlib
import pkgutil

from ..case import Case


def family_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def all_cases() -> list[Case]:
    """The cases of every family, names unique."""
    cases = [c for name in family_modules() for c in importlib.import_module(f"{__name__}.{name}").cases()]
    names = [c.name for c in cases]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"compile cases named twice: {duplicated}")
    return cases


def selected(everything: bool) -> list[Case]:
    """The default tier's cases, or all of them."""
    return [c for c in all_cases() if everything or c.tier == "default"]
