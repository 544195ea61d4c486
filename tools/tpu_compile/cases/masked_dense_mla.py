"""Upstream's masked-dense MLA (`ops.masked_dense_mla`: DeepSeek-V4's CSA attention over the whole fp8 compressed
cache, the top-k selection a mask) at DeepSeek-V4-Flash's shapes: 64 heads, queries of 576 (as upstream's calls:
512 NoPE + 64 RoPE), uint8 caches in 64-token pages, index_topk 512 compressed tokens, so the dense path serves
contexts whose compressed length is within the top-k (2k tokens at ratio 4), and a 32k context with the top-k
expanded into a bitmap on SparseCore. TPU7x only (upstream's Op: generation >= 7); forward only (no VJP)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4_FLASH as V4

TOPK, RATIO, Q_DIM = 512, 4, 576


def _build(heads: int, tokens: int, seqs: int, context: int, page: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        pages_per_seq = -(-context // RATIO // page)
        pages = seqs * pages_per_seq
        specs = [spec(mesh, (tokens, heads, Q_DIM), jnp.bfloat16), spec(mesh, (pages, page, 4, 128), jnp.uint8),
                 spec(mesh, (pages, page // 4, 4, 128), jnp.uint8), spec(mesh, (seqs,), jnp.int32),
                 spec(mesh, (tokens, TOPK), jnp.int32), spec(mesh, (pages,), jnp.int32),
                 spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.masked_dense_mla(*args, sm_scale=Q_DIM**-0.5, implementation="mosaic")
        return forward, specs
    return build


# (what, heads on the chip, tokens, sequences, context tokens a sequence, page size, tier)
SHAPES = (
    ("decode-h64", 64, 128, 128, 2048, 64, "default"),
    ("mixed-h64", 64, 2048, 16, 2048, 64, "all"),
    ("decode-h64-ctx32k", 64, 64, 64, 32768, 64, "all"),
)


def cases() -> list[Case]:
    return [Case(f"masked_dense_mla/{V4.name}/{what}-t{t}-seqs{s}-ctx{c}-page{p}/fwd", "masked_dense_mla", V4.name,
                 "v7x", _build(h, t, s, c, p), tier=tier) for what, h, t, s, c, p, tier in SHAPES]
