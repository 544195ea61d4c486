"""An import blocker: makes chosen top-level packages unimportable in this process.

Used by the bundle's import check and by the tests to prove the kernel needs nothing beyond
JAX: upstream tokamax's heavy dependencies (and tokamax itself) raise ImportError instead of
loading, even where they happen to be installed.
"""

from __future__ import annotations

import importlib.abc
import sys

# What upstream tokamax drags in that the kernel must never need (DESIGN.md §1).
DROPPED = ("pydantic", "jaxtyping", "absl", "flax", "qwix", "einshape", "xprof", "tokamax", "immutabledict")
# What only upstream's test suite needs (requirements/upstream-suite.in), beyond DROPPED.
TEST_ONLY = ("chex", "hypothesis", "flatbuffers")


class BlockedImport(ImportError):
    """Raised for an import the guard blocks."""


class ImportBlocker(importlib.abc.MetaPathFinder):
    """A meta path finder that refuses every module under the given top-level names."""

    def __init__(self, names: tuple[str, ...] = DROPPED) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.split(".", 1)[0] in self.names:
            raise BlockedImport(f"import of {fullname!r} is blocked: the kernel must not need it")
        return None


def install(names: tuple[str, ...] = DROPPED, *, skip_loaded: bool = False) -> ImportBlocker:
    """Blocks `names` from now on.

    Fails if one of them is already imported, unless `skip_loaded`: then the names something
    else already loaded (torch-tpu needs absl, say) stay importable and the rest are blocked.
    """
    already = {m.split(".", 1)[0] for m in sys.modules if m.split(".", 1)[0] in names}
    if already and not skip_loaded:
        raise RuntimeError(f"already imported, cannot block: {sorted(already)}")
    names = tuple(n for n in names if n not in already)
    blocker = ImportBlocker(names)
    sys.meta_path.insert(0, blocker)
    return blocker


def loaded(names: tuple[str, ...] = DROPPED) -> list[str]:
    """Modules under `names` that are in sys.modules."""
    return sorted(m for m in sys.modules if m.split(".", 1)[0] in names)
