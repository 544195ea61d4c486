"""Upstream's MLA ragged paged attention (`ops.experimental.tpu.MultiHeadLatentAttention`, Mosaic) at DeepSeek-V3's
latent shapes: kv_lora_rank 512, RoPE dim 64 (padded to 128 in the cache), the 128 heads served on one chip
(data-parallel attention) or 16 of them (8-way tensor parallel), bf16 cache in 64-token pages, a decode batch and a
prefill chunk. TPU7x only (upstream's Op: generation >= 7); forward only (no VJP upstream).

The page table lives in SMEM (1 MiB): 128 sequences of 32k tokens in 16-token pages do not fit, and our `ops` layer
refuses them (ops/_mla_smem.py) before the compiler would ("Ran out of memory in memory space smem")."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, spec
from ._models import DEEPSEEK_V3

LKV_DIM, R_DIM = 512, 64  # DeepSeek-V3 kv_lora_rank, qk_rope_head_dim
SM_SCALE = (128 + R_DIM) ** -0.5  # qk_nope_head_dim + qk_rope_head_dim
REFUSED = "do not fit the chip's SMEM"


def _build(heads: int, q_len: int, kv_len: int, seqs: int, page: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        tokens, pages_per_seq = q_len * seqs, -(-kv_len // page)
        pages = pages_per_seq * seqs
        bf16 = jnp.bfloat16
        specs = [spec(mesh, (tokens, heads, LKV_DIM), bf16), spec(mesh, (tokens, heads, R_DIM), bf16),
                 spec(mesh, (tokens, LKV_DIM), bf16), spec(mesh, (tokens, R_DIM), bf16),
                 spec(mesh, (pages, page // 2, 2, LKV_DIM + 128), bf16), spec(mesh, (seqs,), jnp.int32),
                 spec(mesh, (pages,), jnp.int32), spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.experimental.tpu.MultiHeadLatentAttention()(*args, sm_scale=SM_SCALE)
        return forward, specs
    return build


# (what, heads on the chip, new tokens a sequence, KV length, sequences, page size, tier)
SHAPES = (
    ("decode-dp-h128", 128, 1, 8192, 64, 64, "default"),
    ("decode-tp8-h16", 16, 1, 32768, 128, 64, "all"),
    ("prefill-tp8-h16", 16, 1024, 4096, 4, 64, "all"),
    # the SMEM boundary at 128 sequences in 16-token pages: 2,016 pages (32,256 tokens) a sequence fit, 2,048 do not
    ("decode-tp8-h16", 16, 1, 32256, 128, 16, "all"),
    ("decode-tp8-h16", 16, 1, 32768, 128, 16, "default", REFUSED),
)


def cases() -> list[Case]:
    return [Case(f"mla/{DEEPSEEK_V3.name}/{what}-q{q}-kv{kv}-seqs{s}-page{p}/{'refused' if expect else 'fwd'}", "mla",
                 DEEPSEEK_V3.name, "v7x", _build(h, q, kv, s, p), expect=expect or COMPILES, tier=tier)
            for what, h, q, kv, s, p, tier, *expect_ in SHAPES for expect in [expect_[0] if expect_ else ""]]
