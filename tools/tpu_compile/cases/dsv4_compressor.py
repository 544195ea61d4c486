"""Upstream's DeepSeek-V4 compress-and-store (`ops.dsv4_compressor`) at DeepSeek-V4-Flash's shapes: head_dim 512,
RoPE 64, the CSA compressor (ratio 4, overlapping windows, fp8 records in an int32 cache with a RoPE cache) and the
HCA compressor (ratio 128, a uint8 record cache and a separate state cache), page geometry as upstream's calls,
a serving step of 2,048 tokens over 64 requests with 32k-token positions. TPU7x only (upstream's Op: generation >=
7); no VJP."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4_FLASH as V4

ROPE_DIM, POSITIONS = 64, 32768
_CSA = dict(state_block_size=4, compress_ratio=4, overlap=True, quant_block=64)
_HCA = dict(state_block_size=32, compress_ratio=128, overlap=False)


def _build(hca: bool, tokens: int, requests: int, stride: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        pages, i32 = requests * stride + 1, jnp.int32
        if hca:
            cache, extra = spec(mesh, (pages, 16, 4, 128), jnp.uint8), spec(mesh, (pages, 256, 4, 128), jnp.uint8)
        else:
            cache, extra = spec(mesh, (pages, 64, 128), i32), spec(mesh, (pages, 16, 128), i32)
        specs = [cache, spec(mesh, (tokens,), i32), spec(mesh, (requests * stride,), i32), spec(mesh, (tokens,), i32),
                 spec(mesh, (tokens,), i32), spec(mesh, (V4.head_dim,), jnp.float32),
                 spec(mesh, (POSITIONS, ROPE_DIM), jnp.float32), extra]

        def forward(cache: Any, pos: Any, bt: Any, reqs: Any, slots: Any, w: Any, cos_sin: Any, other: Any) -> Any:
            return kernel.ops.dsv4_compressor(
                cache, pos, bt, reqs, slots, w, cos_sin_cache=cos_sin, block_table_stride=stride,
                **{"state_cache" if hca else "rope_cache": other}, **(_HCA if hca else _CSA),
                implementation="mosaic_tpu")
        return forward, specs
    return build


# (what, HCA, tokens, requests, block-table stride, tier)
SHAPES = (("csa", False, 2048, 64, 8, "default"), ("hca", True, 2048, 64, 8, "all"))


def cases() -> list[Case]:
    return [Case(f"dsv4_compressor/{V4.name}/{what}-t{t}-reqs{r}-stride{s}/fwd", "dsv4_compressor", V4.name, "v7x",
                 _build(hca, t, r, s), tier=tier) for what, hca, t, r, s, tier in SHAPES]
