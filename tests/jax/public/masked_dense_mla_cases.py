"""Public masked-dense MLA calls (`ops.masked_dense_mla`: DeepSeek-V4 CSA over the whole fp8 KV
cache) on TPU7x, the only chip upstream runs it on; no VJP. As in tests/jax/cases/masked_dense_mla.py:
a top-k covering every cached position (the causal mask built in the kernel) and a smaller top-k
(the selection expanded into a bitmap on SparseCore); upstream's heuristic config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no masked-dense MLA table ships
HEAD_DIM = 576  # 512 NoPE + 64 RoPE


def _specs(tokens: int, heads: int, topk: int, pages: int, page_size: int, seqs: int, pages_per_seq: int) -> tuple:
    return (((tokens, heads, HEAD_DIM), "bfloat16"), ((pages, page_size, 4, 128), "uint8"),
            ((pages, page_size // 4, 4, 128), "uint8"), ((seqs,), "int32"), ((tokens, topk), "int32"),
            ((seqs * pages_per_seq,), "int32"), ((seqs + 1,), "int32"), ((3,), "int32"))


def _forward(implementation: Any = "mosaic", **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.masked_dense_mla(*args, sm_scale=HEAD_DIM**-0.5,
                                                               implementation=implementation, **kw))


def cases() -> list[PublicCase]:
    specs = (12, 8, None, 34, 16, 4, 8)  # 2 decode + 2 mixed sequences, 12 tokens, 8 heads, 8 pages of 16 each
    return [
        PublicCase("masked_dense_mla/analytic-t12-h8-topk128/fwd", "v7x", _specs(*specs[:2], 128, *specs[3:]),
                   _forward()),
        PublicCase("masked_dense_mla/default-bitmap-t12-h8-topk32/fwd", "v7x", _specs(*specs[:2], 32, *specs[3:]),
                   _forward(None)),
    ]
