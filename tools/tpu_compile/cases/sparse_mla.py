"""Upstream's sparse MLA (`ops.sparse_mla`: DeepSeek-V4's CSA top-k gather on SparseCore, then attention merged with
the sliding-window branch) at DeepSeek-V4-Flash's shapes: 64 heads of 512 (448 fp8 NoPE bytes + 64 bf16 RoPE values
a token, as the kernel reads the caches), index_topk 512 compressed tokens a query, attention sinks, compressed
caches in 64-token pages covering 32k-token contexts (8k compressed tokens at ratio 4). TPU7x only (upstream's Op:
generation >= 7 with a SparseCore); forward only (no VJP upstream)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4_FLASH as V4

TOPK, RATIO = 512, 4


def _build(heads: int, tokens: int, seqs: int, context: int, page: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        d, pages_per_seq = V4.head_dim, -(-context // RATIO // page)
        pages = seqs * pages_per_seq
        specs = [spec(mesh, (tokens, heads, d), jnp.bfloat16), spec(mesh, (pages, page, 128), jnp.int32),
                 spec(mesh, (pages, page // 4, 128), jnp.int32), spec(mesh, (tokens, TOPK), jnp.int32),
                 spec(mesh, (pages,), jnp.int32), spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32),
                 spec(mesh, (heads,), jnp.float32), spec(mesh, (tokens, heads, d), jnp.bfloat16),
                 spec(mesh, (tokens, heads), jnp.float32), spec(mesh, (tokens, heads), jnp.float32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.sparse_mla(*args, sm_scale=d**-0.5, implementation="mosaic_tpu")
        return forward, specs
    return build


# (what, heads on the chip, tokens, sequences, context tokens a sequence, page size, tier)
SHAPES = (
    ("decode-h64", 64, 128, 128, 32768, 64, "default"),
    ("mixed-h64", 64, 2048, 16, 32768, 64, "all"),
    ("decode-tp8-h8", 8, 256, 256, 32768, 64, "all"),
    ("decode-h64-ctx1m", 64, 64, 64, 1048576, 64, "all"),  # 1M tokens: a 1 MiB page table, unlike RPA and MLA fine
)


def cases() -> list[Case]:
    return [Case(f"sparse_mla/{V4.name}/{what}-t{t}-seqs{s}-ctx{c}-page{p}/fwd", "sparse_mla", V4.name, "v7x",
                 _build(h, t, s, c, p), tier=tier) for what, h, t, s, c, p, tier in SHAPES]
