"""Upstream's DeepSeek-V4 CSA cache gather (`ops.csa_gather`, a SparseCore kernel) at DeepSeek-V4-Flash's shapes:
index_topk 512 compressed tokens a query gathered from the fp8 NoPE and bf16 RoPE caches (64-token pages) for a
decode batch and a prefill chunk. v6e and v7x, the chips with a SparseCore (upstream's Op: a SparseCore; v5e has
none); no VJP upstream."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V4_FLASH as V4

TOPK, PAGE = 512, 64


def _build(tokens: int, pages: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (pages, PAGE, 128), jnp.int32), spec(mesh, (pages, PAGE // 4, 128), jnp.int32),
                 spec(mesh, (tokens * TOPK,), jnp.int32), spec(mesh, (1,), jnp.int32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.csa_gather(*args, top_k=TOPK, implementation="mosaic_tpu")
        return forward, specs
    return build


# (what, query tokens, cache pages (128 sequences of 32k tokens, 8k compressed), tier)
SHAPES = (("decode-t128", 128, 128 * 128, "default"), ("prefill-t4096", 4096, 128 * 128, "all"))


def cases() -> list[Case]:
    out = []
    for what, t, p, tier in SHAPES:
        name = f"csa_gather/{V4.name}/{what}-k{TOPK}-pages{p}-page{PAGE}/fwd"
        out += on_chips(lambda chip, name=name, t=t, p=p, tier=tier: Case(
            name, "csa_gather", V4.name, chip, _build(t, p), tier=tier if chip == "v7x" else "all"), ("v6e", "v7x"))
    return out
