"""Public SparseCore top-k calls (`ops.top_k`) on TPU7x, the only chip upstream runs it on (16
SparseCore lanes); the op has no VJP. One stage and two stages, with and without row lengths and
returned scores; and a call the kernel refuses (a row length off the 16 lanes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no top-k table ships


def _forward(k: int, lengths: bool, **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        if lengths:
            return lambda scores, row_lengths: api.ops.top_k(scores, k, row_lengths, implementation="mosaic_tpu",
                                                             **kw)
        return lambda scores: api.ops.top_k(scores, k, implementation="mosaic_tpu", **kw)
    return build


def _specs(b: int, n: int, lengths: bool, dtype: str = "float32") -> tuple:
    return (((b, n), dtype), ((b,), "int32")) if lengths else (((b, n), dtype),)


def cases() -> list[PublicCase]:
    return [
        # b = 32 fills the 32 subcores: one stage; scores returned as f32 bits.
        PublicCase("topk/single-stage-b32-n2048-k16/fwd", "v7x", _specs(32, 2048, True),
                   _forward(16, True, return_scores=True)),
        # b = 4 splits each row over 8 subcores and merges the candidates: two stages; int32 score bits in.
        PublicCase("topk/two-stage-b4-n1024-k32-int32/fwd", "v7x", _specs(4, 1024, False, "int32"),
                   _forward(32, False)),
        # n = 1000 is not a multiple of the 16 SparseCore lanes: the kernel refuses it.
        PublicCase("topk/n1000-refused/fwd", "v7x", _specs(8, 1000, False), _forward(8, False)),
    ]
