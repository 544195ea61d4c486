"""The public calls both sides lower, and the tables both sides choose configs from.

A `PublicCase` is one call on one chip; `TABLES` names every shipped table the selection test
walks, with the Op that reads it and the parser that turns its keys back into arguments.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

PORTED_TABLES = Path(__file__).resolve().parents[3] / "torch-ext/tokamax/_ported/data/autotuning"
# chip -> upstream's table folder; v5p has tables (ragged dot, flash attention) but no call cases
CHIPS = {"v5e": "tpu_v5_lite", "v5p": "tpu_v5", "v6e": "tpu_v6_lite", "v7x": "tpu7x"}
CALL_CHIPS = ("v5e", "v6e", "v7x")


@dataclasses.dataclass(frozen=True)
class PublicCase:
    """One public call: `build(api)` gives fn(*arrays) -> output (or gradients, for grad cases)."""

    id: str
    chip: str
    specs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype name) of each argument
    build: Callable[[Any], Callable[..., Any]]

    def shape_dtypes(self) -> list[jax.ShapeDtypeStruct]:
        return [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in self.specs]


@dataclasses.dataclass(frozen=True)
class Table:
    """A shipped autotuning table: its file stem, the Op class reading it, and its key parser."""

    id: str
    stem: str  # e.g. "pallas_mosaic_tpu_ragged_dot"
    op: Callable[[Any], Any]  # api -> an Op instance
    arguments: Callable[[dict, Any], dict]  # (key, api) -> bind kwargs

    def chips(self) -> list[str]:
        return [chip for chip, device in CHIPS.items() if (PORTED_TABLES / device / f"{self.stem}.json").exists()]

    def entries(self, chip: str) -> list[list]:
        return json.loads((PORTED_TABLES / CHIPS[chip] / f"{self.stem}.json").read_text())["entries"]

    def tuned_keys(self, chip: str, plain: Callable[[dict], bool], limit: int) -> list[dict]:
        """The first `limit` keys (table order) with a tuned config that `plain` accepts; none off-chip."""
        if chip not in self.chips():
            return []
        return [key for key, config, _ in self.entries(chip) if config is not None and plain(key)][:limit]


def dims(shape: str) -> list[int]:
    """The dimensions of a table's shape string, `bf16[8192,4096]` -> [8192, 4096]."""
    return [int(d) for d in shape[shape.index("[") + 1 : -1].split(",")]


def grad_of_square(fn: Callable[..., Any], argnums: tuple[int, ...]) -> Callable[..., Any]:
    """Gradients of sum(fn(...)^2) in f32: a loss that uses the output's values, so the forward kernel
    runs under `jax.grad` too (a linear loss would let XLA drop it)."""
    return jax.grad(lambda *args: jnp.sum(jnp.square(fn(*args).astype(jnp.float32))), argnums=argnums)


def _json_like(value: Any) -> Any:
    if isinstance(value, enum.Enum):  # as `Type.NAME`, so an int where an enum belongs differs
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (tuple, list)):
        return [_json_like(v) for v in value]
    return value


def config_fields(config: Any) -> dict:
    """A config's fields as JSON-like values, the same on both sides of the comparison."""
    return {k: _json_like(v) for k, v in dataclasses.asdict(config).items()}


def _case_modules() -> list:
    """Every `*_cases.py` module beside this one: one per op family, each with `cases()` and `TABLES`."""
    import importlib
    import pkgutil

    from . import __path__ as here

    names = sorted(m.name for m in pkgutil.iter_modules(here) if m.name.endswith("_cases"))
    return [importlib.import_module(f"{__package__}.{name}") for name in names]


def all_public_cases() -> list[PublicCase]:
    out = [case for module in _case_modules() for case in module.cases()]
    ids = [f"{c.id}@{c.chip}" for c in out]
    assert len(ids) == len(set(ids)), "duplicate public case ids"
    return out


def all_tables() -> list[Table]:
    tables = [table for module in _case_modules() for table in module.TABLES]
    stems = [t.stem for t in tables]
    assert len(stems) == len(set(stems)), "a table is registered twice"
    return tables
