"""Public SparseCore ragged gather calls (`ops.ragged_gather`) on v6e and TPU7x (the chips with a
SparseCore that upstream's Op admits); the op has no VJP. f32, bf16 (row-packed pairs) and int8
rows; v5e has no SparseCore and is not called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no ragged gather table ships


def _forward(implementation: Any = "mosaic") -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda x, indices, start, end: api.ops.ragged_gather(x, indices, start, end,
                                                                             implementation=implementation))


def _specs(in_size: int, out_size: int, hidden: int, dtype: str) -> tuple:
    return (((in_size, hidden), dtype), ((out_size,), "int32"), ((1,), "int32"), ((1,), "int32"))


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in ("v6e", "v7x"):
        out += [
            PublicCase("ragged_gather/f32-64x128-out40/fwd", chip, _specs(64, 40, 128, "float32"), _forward()),
            PublicCase("ragged_gather/bf16-64x256-out600/fwd", chip, _specs(64, 600, 256, "bfloat16"), _forward()),
            PublicCase("ragged_gather/default-int8-128x128-out300/fwd", chip, _specs(128, 300, 128, "int8"),
                       _forward(None)),
        ]
    return out
