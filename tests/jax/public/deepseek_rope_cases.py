"""Public DeepSeek-V4 RoPE calls (`ops.deepseek_rope`) on TPU7x, the only chip upstream runs the
kernels on; the op has no VJP. The three modes (`rope` inverse, `qnorm_rope`, `rope_quant` to fp8),
and a `qnorm_rope` with head_dim 128, which upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from .cases import PublicCase

# Every call passes upstream's default eps, 1e-6, explicitly: the profiling payload records it, so the
# identity check also covers how small floats are written there (as pydantic writes them).
EPS = 1e-6

TABLES: list = []  # the deepseek rope table is registered in tpu_ops_cases.py


def _forward(implementation: Any = "mosaic_tpu", **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    kw.setdefault("eps", EPS)
    return lambda api: (lambda x, positions, cache: api.ops.deepseek_rope(x, positions, cache,
                                                                          implementation=implementation, **kw))


def _specs(shape: tuple[int, ...], dtype: str, rotary_dim: int = 64, max_position: int = 64) -> tuple:
    return ((shape, dtype), ((shape[0],), "int32"), ((max_position, rotary_dim), "float32"))


def cases() -> list[PublicCase]:
    return [
        PublicCase("deepseek_rope/rope-inverse-bf16-t16h4d256/fwd", "v7x", _specs((16, 4, 256), "bfloat16"),
                   _forward(inverse=True)),
        PublicCase("deepseek_rope/qnorm-rope-f32-t8h4d256/fwd", "v7x", _specs((8, 4, 256), "float32"),
                   _forward(mode="qnorm_rope")),
        PublicCase("deepseek_rope/rope-quant-e4m3-bf16-t16h8d128/fwd", "v7x", _specs((16, 8, 128), "bfloat16"),
                   _forward(None, mode="rope_quant", quant_dtype=jnp.float8_e4m3fn)),
        PublicCase("deepseek_rope/qnorm-rope-d128-refused/fwd", "v7x", _specs((8, 4, 128), "float32"),
                   _forward(mode="qnorm_rope")),
    ]
