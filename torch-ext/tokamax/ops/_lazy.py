"""Namespaces whose names load on first use, so that importing the kernel stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# A name's source: (module relative to the kernel package, attribute; "" for the module itself).
Source = tuple[str, str]


def namespace(module_name: str, names: dict[str, Source]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for module `module_name`, resolving `names` lazily."""
    package = module_name.split(".", 1)[0]
    module_globals = importlib.import_module(module_name).__dict__

    def getattr_(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        where, attr = names[name]
        found = importlib.import_module(where, package)
        value = getattr(found, attr) if attr else found
        module_globals[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(module_globals) | set(names))

    return getattr_, dir_
