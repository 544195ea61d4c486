"""Upstream's lightning indexer (`ops.lightning_indexer(implementation="mosaic")`: scores over an fp8 paged key cache,
top-k on SparseCore) at DeepSeek-V3.2's shapes (64 indexer heads of 128, index_topk 2048 over 32k-token contexts) and
DeepSeek-V4-Flash's (the CSA indexer: compression ratio 4, index_topk 512). Pages of 128 tokens (upstream's heuristic
takes a page a KV block, and its kernel needs 128-token blocks). TPU7x only (upstream's Op: generation >= 7);
forward only (no VJP upstream)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V3_2, DEEPSEEK_V4_FLASH, Model

HEADS, D, PAGE = 64, 128, 128  # index_n_heads, index_head_dim (both models)


def _build(tokens: int, seqs: int, context: int, k: int, ratio: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        pages_per_seq = -(-context // ratio // PAGE)
        pages = seqs * pages_per_seq
        # cache: HEAD_ALONG_SUBLANE uint8 records, 4 tokens a packed row, D key bytes + scale, 128-lane padded
        specs = [spec(mesh, (tokens, HEADS, D), jnp.bfloat16), spec(mesh, (tokens, HEADS), jnp.bfloat16),
                 spec(mesh, (pages, PAGE // 4, 4, 2 * D), jnp.uint8), spec(mesh, (seqs,), jnp.int32),
                 spec(mesh, (pages,), jnp.int32), spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.lightning_indexer(*args, k=k, compression_ratio=ratio, implementation="mosaic")
        return forward, specs
    return build


# (model, what, tokens, sequences, context a sequence, top-k, compression ratio, tier)
SHAPES: tuple[tuple[Model, str, int, int, int, int, int, str], ...] = (
    (DEEPSEEK_V4_FLASH, "csa-decode", 128, 128, 32768, 512, 4, "default"),
    (DEEPSEEK_V3_2, "decode", 128, 128, 32768, 2048, 1, "all"),
    (DEEPSEEK_V3_2, "prefill", 2048, 2, 32768, 2048, 1, "all"),
)


def cases() -> list[Case]:
    return [Case(f"lightning_indexer/{m.name}/{what}-t{t}-seqs{s}-ctx{c}-k{k}-ratio{r}/fwd", "lightning_indexer",
                 m.name, "v7x", _build(t, s, c, k, r), tier=tier) for m, what, t, s, c, k, r, tier in SHAPES]
