"""Public DeepSeek-V4 reverse-RoPE `wo_a` projection calls (`ops.grouped_lowrank_proj`) on TPU7x,
the only chip upstream runs the kernels on; the op has no VJP. Inverse rotation with and without
fp8 activations, a forward rotation, and a head_dim of 128, which upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the grouped lowrank proj table is registered in tpu_ops_cases.py
HEADS_PER_GROUP = 8


def _specs(tokens: int, groups: int, rank: int, head_dim: int, rotary_dim: int = 64) -> tuple:
    return (((tokens, groups * HEADS_PER_GROUP, head_dim), "bfloat16"), ((tokens,), "int32"),
            ((64, rotary_dim), "float32"), ((HEADS_PER_GROUP * head_dim, groups * rank), "float8_e4m3fn"),
            ((groups * rank,), "float32"))


def _forward(implementation: Any = "mosaic_tpu", **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.grouped_lowrank_proj(*args, implementation=implementation, **kw))


def cases() -> list[PublicCase]:
    return [
        PublicCase("grouped_lowrank_proj/inverse-t32g2r256d256/fwd", "v7x", _specs(32, 2, 256, 256),
                   _forward(quantize_activations=False)),
        PublicCase("grouped_lowrank_proj/default-quant-forward-t16g1r128d384/fwd", "v7x",
                   _specs(16, 1, 128, 384, rotary_dim=32), _forward(None, inverse=False)),
        PublicCase("grouped_lowrank_proj/d128-refused/fwd", "v7x", _specs(16, 1, 128, 128), _forward()),
    ]
