"""MoE router top-k (`select`): cases for lowering, interpret numerics and Mosaic identity.

Upstream's op supports TPU generation 6 and newer (v6e, TPU7x); on v5e it falls back to XLA.
"""

from __future__ import annotations

import functools

import numpy as np

from . import Case, rng

KERNEL = "_src.ops.router_topk.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.router_topk.reference"
EXACT = "exact: kernel and reference run the same max-and-mask passes on f32, so values and ids match bit for bit"


def _scores(rows: int, experts: int, poison: bool = False) -> tuple[np.ndarray]:
    r = rng(rows + experts)
    scores = r.random((rows, experts), dtype=np.float32)  # uniform [0, 1), as upstream draws router scores
    if poison:
        # Each spelling of the sentinel hazard, ties across the top-k boundary, and a fully poisoned row.
        bad = np.array([np.nan, -np.inf, np.finfo(np.float32).min], np.float32)
        scores[r.integers(rows, size=12), r.integers(experts, size=12)] = bad[r.integers(3, size=12)]
        scores[1, 20:32] = 4.0
        scores[2] = np.nan
    return (scores,)


def _select(get, k: int, **kw):  # noqa: ANN202
    return functools.partial(get(KERNEL).select, topk=k, **kw)


def _reference(get, k: int):  # noqa: ANN202
    return lambda scores: get(REFERENCE).rowmax_topk(scores, k)


CASES = [
    Case(
        id="router_topk/t64-e512-k10",
        call=lambda get: _select(get, 10),
        inputs=lambda: _scores(64, 512),
        reference=lambda get: _reference(get, 10),
        tolerance_why=EXACT,
        chips=("v6e", "v7x"),
    ),
    Case(
        # 40 rows in blocks of 16: the last grid step reads a partial block.
        id="router_topk/t40-e256-k8-block16-poisoned",
        call=lambda get: _select(get, 8, block_rows=16),
        inputs=lambda: _scores(40, 256, poison=True),
        reference=lambda get: _reference(get, 8),
        tolerance_why=EXACT + " (NaN weights of the poisoned row compare equal)",
        chips=("v6e", "v7x"),
    ),
]
