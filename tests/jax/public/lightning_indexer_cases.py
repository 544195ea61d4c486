"""Public lightning indexer calls (`ops.lightning_indexer(implementation="mosaic")`) on v7x only (upstream's Op
supports generation >= 7; its top-k runs on the SparseCore), forward only (no VJP upstream): top-k over an FP8
paged key cache with upstream's heuristic config, and with a compression ratio returning the scores. The
heuristic config takes one page per kv block and the kernel needs 128-token blocks, so upstream refuses pages of
64 tokens unless the caller passes a config: that call is an error case (both sides must raise the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import CALL_CHIPS, PublicCase, Table

TABLES: list[Table] = []  # upstream ships no lightning indexer table
CHIPS = tuple(chip for chip in CALL_CHIPS if chip == "v7x")


def _specs(tokens: int, heads: int, d: int, pages: int, page: int, seqs: int, per_seq: int) -> tuple:
    # cache_kv: HEAD_ALONG_SUBLANE uint8 records, 4 tokens per packed row, D key bytes + scale, 128-lane padded
    return (((tokens, heads, d), "bfloat16"), ((tokens, heads), "bfloat16"), ((pages, page // 4, 4, 2 * d), "uint8"),
            ((seqs,), "int32"), ((seqs * per_seq,), "int32"), ((seqs + 1,), "int32"), ((3,), "int32"))


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.lightning_indexer(*args, implementation="mosaic", **kw))


def cases() -> list[PublicCase]:
    calls = [
        ("h8-d128-t16-page128-k32", _specs(16, 8, 128, 8, 128, 2, 4), _forward(k=32)),
        ("h16-d128-t32-page128-k64-c4-scores", _specs(32, 16, 128, 16, 128, 4, 4),
         _forward(k=64, compression_ratio=4, return_scores=True)),
        ("refused-page64-heuristic", _specs(16, 8, 128, 8, 64, 2, 4), _forward(k=32)),
    ]
    return [PublicCase(f"lightning_indexer/mosaic/{name}", chip, specs, build)
            for chip in CHIPS for name, specs, build in calls]
