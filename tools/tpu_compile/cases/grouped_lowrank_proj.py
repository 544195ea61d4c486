"""Upstream's DeepSeek-V4 reverse-RoPE `wo_a` projection (`tokamax.ops.grouped_lowrank_proj`; no VJP)
at DeepSeek-V4's shapes: the attention output (tokens, 128 heads, 512) in 16 groups of 8 heads, each
projected by fp8 `wo_a` (4,096 x 16,384) to rank 1,024, activations quantized to fp8 (upstream's
default) or not. TPU7x only, as upstream."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4, DSV4_MAX_POSITION, DSV4_O_GROUPS, DSV4_O_RANK, DSV4_ROTARY_DIM

HEADS_PER_GROUP = 8


def _build(tokens: int, quantize: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        d = DEEPSEEK_V4.head_dim
        specs = [spec(mesh, (tokens, DEEPSEEK_V4.heads, d), jnp.bfloat16), spec(mesh, (tokens,), jnp.int32),
                 spec(mesh, (DSV4_MAX_POSITION, DSV4_ROTARY_DIM), jnp.float32),
                 spec(mesh, (HEADS_PER_GROUP * d, DSV4_O_GROUPS * DSV4_O_RANK), jnp.float8_e4m3fn),
                 spec(mesh, (DSV4_O_GROUPS * DSV4_O_RANK,), jnp.float32)]
        return (lambda *a: kernel.ops.grouped_lowrank_proj(*a, quantize_activations=quantize,
                                                           implementation="mosaic_tpu")), specs
    return build


def cases() -> list[Case]:
    return [Case(f"grouped_lowrank_proj/{DEEPSEEK_V4.name}/t{tokens}-{'fp8' if quantize else 'bf16'}-act/fwd",
                 "grouped_lowrank_proj", DEEPSEEK_V4.name, "v7x", _build(tokens, quantize),
                 tier="default" if (tokens == 4096 and quantize) else "all")
            for tokens in (4096, 128) for quantize in (True, False)]
