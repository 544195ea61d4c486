"""Public MLA sliding-window attention calls (`ops.experimental.mla_swa`) on TPU7x, the only chip
upstream runs it on; no VJP. As tests/jax/cases/mla_swa.py: DeepSeek-V4's uint8 slab cache
(head_dim 512, 16-token logical pages in 20-token physical ones, 8 heads) for a mixed batch (2
decode + 2 prefill sequences) and the CSA host's int32 word cache for a decode batch, each with
upstream's heuristic config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # no MLA SWA table ships
HEAD_DIM, HEADS, PAGE_SIZE, PAGES_PER_SEQ = 512, 8, 16, 8
PHYS_PAGE = PAGE_SIZE + 4


def _specs(tokens: int, batch: int, int32_cache: bool) -> tuple:
    pages = batch * PAGES_PER_SEQ + 2
    cache = ((pages, 2 * PHYS_PAGE, 128), "int32") if int32_cache else ((pages, 2 * PHYS_PAGE, 4, 128), "uint8")
    return (((tokens, HEADS, HEAD_DIM), "bfloat16"), ((tokens, HEAD_DIM), "bfloat16"), cache, ((batch,), "int32"),
            ((batch * PAGES_PER_SEQ,), "int32"), ((batch + 1,), "int32"), ((3,), "int32"), ((HEADS,), "float32"))


def _forward(window: int, implementation: Any = "mosaic", **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.experimental.mla_swa(
        *args, sliding_window=window, logical_page_size=PAGE_SIZE, sm_scale=HEAD_DIM**-0.5,
        implementation=implementation, **kw))


def cases() -> list[PublicCase]:
    return [
        PublicCase("mla_swa/mixed-t21-b4-w16/fwd", "v7x", _specs(21, 4, False), _forward(16)),
        PublicCase("mla_swa/default-decode-t3-b3-w32-int32-cache/fwd", "v7x", _specs(3, 3, True),
                   _forward(32, None)),
    ]
