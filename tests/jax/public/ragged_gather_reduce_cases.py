"""Public SparseCore ragged gather reduce calls (`ops.ragged_gather_reduce`, the MoE combine) on
TPU7x, the only chip with the 16 SparseCore lanes the kernel needs; the op has no VJP.

Upstream's Op runs its pure-JAX reference for inputs small against VMEM (`_is_small_input`), so
the kernel cases take an `x` of 8192 x 2048 bf16 (only shapes are lowered); a small `x` is the
reference path, checked too (no Mosaic kernel, hence `/fallback/`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the ragged gather reduce table is registered in tpu_ops_cases.py


def _forward(group: int, implementation: Any = "mosaic_tpu") -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda x, i, w, m: api.ops.ragged_gather_reduce(x, i, w, m, group,
                                                                        implementation=implementation))


def _specs(rows: int, hidden: int, routes: int) -> tuple:
    return (((rows, hidden), "bfloat16"), ((routes,), "int32"), ((routes,), "bfloat16"), ((routes,), "bool"))


def cases() -> list[PublicCase]:
    return [
        PublicCase("ragged_gather_reduce/two-route-t512-g2-h2048-rows8192/fwd", "v7x", _specs(8192, 2048, 1024),
                   _forward(2)),
        PublicCase("ragged_gather_reduce/default-t70-g4-h2048-rows8200/fwd", "v7x", _specs(8200, 2048, 280),
                   _forward(4, None)),
        PublicCase("ragged_gather_reduce/fallback/small-t64-g2-h256-rows128/fwd", "v7x", _specs(128, 256, 128),
                   _forward(2)),
    ]
