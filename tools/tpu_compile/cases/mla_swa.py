"""Upstream's MLA sliding-window attention (`ops.experimental.mla_swa`, Mosaic) at DeepSeek-V4-Flash's shapes: the
sliding-window branch of every layer, 64 heads of 512 over one shared latent KV, window 128 tokens, attention sinks,
the uint8 slab cache (16-token logical pages in 20-token physical ones, as upstream's tests; a window needs 9 pages a
sequence), decode batches and mixed prefill. TPU7x only (upstream's Op: generation >= 7); forward only (no VJP)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V4_FLASH as V4

WINDOW, PAGE = 128, 16
PHYS_PAGE = PAGE + 4


def _build(heads: int, tokens: int, seqs: int, pages_per_seq: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        d, pages = V4.head_dim, seqs * pages_per_seq
        specs = [spec(mesh, (tokens, heads, d), jnp.bfloat16), spec(mesh, (tokens, d), jnp.bfloat16),
                 spec(mesh, (pages, 2 * PHYS_PAGE, 4, 128), jnp.uint8), spec(mesh, (seqs,), jnp.int32),
                 spec(mesh, (pages,), jnp.int32), spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32),
                 spec(mesh, (heads,), jnp.float32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.experimental.mla_swa(*args, sliding_window=WINDOW, logical_page_size=PAGE,
                                                   sm_scale=d**-0.5, implementation="mosaic")
        return forward, specs
    return build


# (what, heads on the chip, tokens, sequences, pages a sequence, tier)
SHAPES = (
    ("decode-h64", 64, 128, 128, WINDOW // PAGE + 1, "default"),
    ("mixed-h64", 64, 2048, 64, 2048 // PAGE + 1, "all"),
    ("decode-tp8-h8", 8, 256, 256, WINDOW // PAGE + 1, "all"),
)


def cases() -> list[Case]:
    return [Case(f"mla_swa/{V4.name}/{what}-t{t}-seqs{s}-pps{p}/fwd", "mla_swa", V4.name, "v7x", _build(h, t, s, p),
                 tier=tier) for what, h, t, s, p, tier in SHAPES]
