"""Public DeepSeek-V4 compress-and-store calls (`ops.dsv4_compressor`) on TPU7x, the only chip
upstream runs the kernel on; no VJP. CSA (overlapping windows, an int32 cache with fp8 records and
a RoPE cache) and HCA (a uint8 record cache and a separate state cache), shaped as the kernel-level
cases in tests/jax/cases/dsv4_compressor.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the dsv4 compressor table is registered in tpu_ops_cases.py
HEAD_DIM, ROPE_DIM = 512, 64
RMS_EPS = 1e-6  # upstream's default; the payload records it (small floats as pydantic writes them)

_CSA = dict(block_table_stride=7, state_block_size=4, compress_ratio=4, overlap=True, quant_block=64)
_HCA = dict(block_table_stride=13, state_block_size=32, compress_ratio=128, overlap=False)


def _specs(cache: tuple, tokens: int, block_table: int, positions: int, extra: tuple) -> tuple:
    return (cache, ((tokens,), "int32"), ((block_table,), "int32"), ((tokens,), "int32"), ((tokens,), "int32"),
            ((HEAD_DIM,), "float32"), ((positions, ROPE_DIM), "float32"), extra)


def _forward(extra: str, options: dict, implementation: Any = "mosaic_tpu") -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        def call(cache: Any, pos: Any, bt: Any, reqs: Any, slots: Any, w: Any, cos_sin: Any, other: Any) -> Any:
            return api.ops.dsv4_compressor(cache, pos, bt, reqs, slots, w, cos_sin_cache=cos_sin, **{extra: other},
                                           **options, rms_eps=RMS_EPS, implementation=implementation)
        return call
    return build


def cases() -> list[PublicCase]:
    csa = _specs(((13, 64, 128), "int32"), 8, 14, 64, ((13, 16, 128), "int32"))
    hca = _specs(((13, 16, 4, 128), "uint8"), 4, 13, 384, ((13, 256, 4, 128), "uint8"))
    return [
        PublicCase("dsv4_compressor/csa-t8-p64/fwd", "v7x", csa, _forward("rope_cache", _CSA)),
        PublicCase("dsv4_compressor/default-hca-t4-p16-state256/fwd", "v7x", hca,
                   _forward("state_cache", _HCA, None)),
    ]
