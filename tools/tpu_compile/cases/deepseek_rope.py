"""Upstream's DeepSeek-V4 RoPE (`tokamax.ops.deepseek_rope`; no VJP) at DeepSeek-V4's shapes, 4,096
tokens: per-head RMSNorm + RoPE of the queries (128 heads of 512), RoPE of the single KV head (512),
and RoPE + fp8 quantization of the indexer's 64 heads of 128; the trailing 64 channels rotated,
positions up to 65,536. TPU7x only, as upstream."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4, DSV4_MAX_POSITION, DSV4_ROTARY_DIM

TOKENS = 4096
CALLS = {  # what -> (x's shape, keyword arguments)
    "q-qnorm-rope": ((TOKENS, DEEPSEEK_V4.heads, DEEPSEEK_V4.head_dim), {"mode": "qnorm_rope"}),
    "kv-rope": ((TOKENS, DEEPSEEK_V4.head_dim), {"mode": "rope"}),
    "o-rope-inverse": ((TOKENS, DEEPSEEK_V4.heads, DEEPSEEK_V4.head_dim), {"mode": "rope", "inverse": True}),
    "indexer-rope-quant-e4m3": ((TOKENS, 64, 128), {"mode": "rope_quant", "quant_dtype": jnp.float8_e4m3fn}),
}


def _build(shape: tuple[int, ...], kw: dict) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, shape, jnp.bfloat16), spec(mesh, (shape[0],), jnp.int32),
                 spec(mesh, (DSV4_MAX_POSITION, DSV4_ROTARY_DIM), jnp.float32)]
        return (lambda x, positions, cache: kernel.ops.deepseek_rope(x, positions, cache, eps=1e-6,
                                                                     implementation="mosaic_tpu", **kw)), specs
    return build


def cases() -> list[Case]:
    return [Case(f"deepseek_rope/{DEEPSEEK_V4.name}/{what}-{'x'.join(map(str, shape))}/fwd", "deepseek_rope",
                 DEEPSEEK_V4.name, "v7x", _build(shape, kw), tier="default" if what == "q-qnorm-rope" else "all")
            for what, (shape, kw) in CALLS.items()]
