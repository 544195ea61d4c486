"""Public DeepSeek-V4 compressor projection calls (`ops.proj_and_save_state`) on v6e and TPU7x
(upstream's Op: generation 6 and newer); the op has no VJP. An int32-word cache in f32 and a uint8
slab cache in bf16, each with upstream's heuristic tiles; and an APE of the wrong width, which upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the proj and save state table is registered in tpu_ops_cases.py


def _specs(*, state_width: int, lanes: int, tokens_per_page: int, compress_ratio: int, tokens: int, hidden: int,
           pages: int, words: bool, dtype: str) -> tuple:
    page_size = tokens_per_page * 2 * state_width // lanes
    cache = ((pages, page_size, lanes), "int32") if words else ((pages, page_size, 4, lanes), "uint8")
    return (((tokens, hidden), dtype), ((hidden, 2 * state_width), dtype), ((compress_ratio, state_width), dtype),
            ((tokens,), "int32"), ((tokens,), "int32"), cache)


def _forward(compress_ratio: int, implementation: Any = "mosaic_tpu") -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.proj_and_save_state(*args, compress_ratio=compress_ratio,
                                                                  implementation=implementation))


def cases() -> list[PublicCase]:
    words = _specs(state_width=128, lanes=128, tokens_per_page=8, compress_ratio=4, tokens=13, hidden=256, pages=3,
                   words=True, dtype="float32")
    slabs = _specs(state_width=256, lanes=256, tokens_per_page=16, compress_ratio=8, tokens=136, hidden=384,
                   pages=10, words=False, dtype="bfloat16")
    out: list[PublicCase] = []
    for chip in ("v6e", "v7x"):
        out += [
            PublicCase("proj_and_save_state/int32-words-f32-sw128-t13-h256/fwd", chip, words, _forward(4)),
            PublicCase("proj_and_save_state/default-u8-slabs-bf16-sw256-t136-h384/fwd", chip, slabs,
                       _forward(8, None)),
        ]
    # An APE of the wrong width (not the state width, 128): upstream's Op refuses it.
    bad_ape = (*words[:2], ((4, 64), "float32"), *words[3:])
    out.append(PublicCase("proj_and_save_state/ape-width-refused/fwd", "v7x", bad_ape, _forward(4)))
    return out
