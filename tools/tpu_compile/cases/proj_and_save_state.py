"""Upstream's DeepSeek-V4 compressor projection (`ops.proj_and_save_state`) at DeepSeek-V4-Flash's shapes: hidden 4096
projected to the f32 compressor states and written to the state cache, for the CSA compressor (overlapping windows:
state width 2 x 512, ratio 4, int32-word pages of 4 tokens) and the HCA compressor (width 512, ratio 128, uint8
slabs of 32 tokens), over a serving step's 2,048 tokens. v6e and v7x (upstream's Op: generation >= 6); no VJP."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V4_FLASH as V4

LANES = 128


def _build(tokens: int, state_width: int, ratio: int, tokens_per_page: int, pages: int, words: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        page_size = tokens_per_page * 2 * state_width // LANES
        cache = (spec(mesh, (pages, page_size, LANES), jnp.int32) if words
                 else spec(mesh, (pages, page_size, 4, LANES), jnp.uint8))
        specs = [spec(mesh, (tokens, V4.hidden), jnp.bfloat16), spec(mesh, (V4.hidden, 2 * state_width), jnp.bfloat16),
                 spec(mesh, (ratio, state_width), jnp.bfloat16), spec(mesh, (tokens,), jnp.int32),
                 spec(mesh, (tokens,), jnp.int32), cache]

        def forward(*args: Any) -> Any:
            return kernel.ops.proj_and_save_state(*args, compress_ratio=ratio, implementation="mosaic_tpu")
        return forward, specs
    return build


# (what, tokens, state width, compress ratio, tokens a page, pages, int32 words, tier)
SHAPES = (
    ("csa", 2048, 2 * V4.head_dim, 4, 4, 4096, True, "default"),
    ("hca", 2048, V4.head_dim, 128, 32, 1024, False, "all"),
)


def cases() -> list[Case]:
    out = []
    for what, t, sw, r, tpp, p, words, tier in SHAPES:
        name = f"proj_and_save_state/{V4.name}/{what}-t{t}-sw{sw}-ratio{r}/fwd"
        out += on_chips(lambda chip, name=name, shape=(t, sw, r, tpp, p, words), tier=tier: Case(
            name, "proj_and_save_state", V4.name, chip, _build(*shape), tier=tier if chip == "v7x" else "all"),
            ("v6e", "v7x"))
    return out
