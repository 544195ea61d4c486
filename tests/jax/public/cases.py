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


def config_fields(config: Any) -> dict:
    """A config's fields as JSON values; enums as `Type.NAME`, so an int where an enum belongs differs."""
    return {k: f"{type(v).__name__}.{v.name}" if isinstance(v, enum.Enum) else v
            for k, v in dataclasses.asdict(config).items()}


def all_public_cases() -> list[PublicCase]:
    from . import attention_cases, ragged_dot_cases, splash_cases

    out = ragged_dot_cases.cases() + splash_cases.cases() + attention_cases.cases()
    ids = [f"{c.id}@{c.chip}" for c in out]
    assert len(ids) == len(set(ids)), "duplicate public case ids"
    return out


def all_tables() -> list[Table]:
    from . import attention_cases, ragged_dot_cases, splash_cases

    return ragged_dot_cases.TABLES + splash_cases.TABLES + attention_cases.TABLES
