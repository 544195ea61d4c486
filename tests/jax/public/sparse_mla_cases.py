"""Public sparse MLA calls (`ops.sparse_mla`: DeepSeek-V4 CSA gather + attention) on TPU7x, the only
chip upstream runs it on (its gather runs on a 16-lane SparseCore); no VJP. A mixed decode/prefill
batch as in tests/jax/cases/sparse_mla.py (2 decode + 2 prefill sequences, 16 tokens, 8 heads, top-k
128 over 16-token pages) with upstream's heuristic config, and a top-k off the 128 multiple, which
upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no sparse MLA table ships
HEAD_DIM = 512  # 448 fp8 NoPE bytes + 64 bf16 RoPE values per token, as the kernel reads the caches


def _specs(tokens: int, heads: int, topk: int, pages: int, page_size: int, seqs: int, pages_per_seq: int) -> tuple:
    return (((tokens, heads, HEAD_DIM), "bfloat16"), ((pages, page_size, 128), "int32"),
            ((pages, page_size // 4, 128), "int32"), ((tokens, topk), "int32"), ((seqs * pages_per_seq,), "int32"),
            ((seqs + 1,), "int32"), ((3,), "int32"), ((heads,), "float32"), ((tokens, heads, HEAD_DIM), "bfloat16"),
            ((tokens, heads), "float32"), ((tokens, heads), "float32"))


def _forward(implementation: Any = "mosaic_tpu") -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.sparse_mla(*args, sm_scale=HEAD_DIM**-0.5,
                                                         implementation=implementation))


def cases() -> list[PublicCase]:
    return [
        PublicCase("sparse_mla/mixed-s4-t16-h8-topk128-p16/fwd", "v7x", _specs(16, 8, 128, 67, 16, 4, 16),
                   _forward()),
        PublicCase("sparse_mla/default-decode-s8-t8-h16-topk256-p64/fwd", "v7x", _specs(8, 16, 256, 34, 64, 8, 4),
                   _forward(None)),
        PublicCase("sparse_mla/topk96-refused/fwd", "v7x", _specs(16, 8, 96, 67, 16, 4, 16), _forward()),
    ]
