"""Public MLA ragged paged attention calls: upstream's experimental Op class
`ops.experimental.tpu.MultiHeadLatentAttention` (its `api.py` has no function, only the Op table),
on TPU7x, the only chip upstream runs it on; no VJP. Decode and prefill batches as in
tests/jax/cases/mla.py (8 heads, latent dim 128, RoPE dim 64, 16-token pages), upstream's
heuristic config; and page indices not divisible by the sequences, which upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no MLA table ships
PAGE_SIZE, HEADS, LKV_DIM, R_DIM = 16, 8, 128, 64
SM_SCALE = (LKV_DIM + R_DIM) ** -0.5


def _specs(q_len: int, kv_len: int, batch: int, spare_page_indices: int = 0) -> tuple:
    tokens, pages_per_seq = q_len * batch, -(-kv_len // PAGE_SIZE)
    pages = pages_per_seq * batch + 2
    return (((tokens, HEADS, LKV_DIM), "bfloat16"), ((tokens, HEADS, R_DIM), "bfloat16"),
            ((tokens, LKV_DIM), "bfloat16"), ((tokens, R_DIM), "bfloat16"),
            ((pages, PAGE_SIZE // 2, 2, LKV_DIM + 128), "bfloat16"), ((batch,), "int32"),
            ((pages_per_seq * batch + spare_page_indices,), "int32"), ((batch + 1,), "int32"), ((3,), "int32"))


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.experimental.tpu.MultiHeadLatentAttention()(
        *args, sm_scale=SM_SCALE, **kw))


def cases() -> list[PublicCase]:
    return [
        PublicCase("mla/decode-b4-kv37-h8/fwd", "v7x", _specs(1, 37, 4), _forward()),
        PublicCase("mla/prefill-b2-q8-kv40-h8/fwd", "v7x", _specs(8, 40, 2), _forward()),
        PublicCase("mla/page-indices-refused/fwd", "v7x", _specs(1, 37, 4, spare_page_indices=1), _forward()),
    ]
