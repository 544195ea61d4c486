"""Upstream's batched ragged paged attention (`ops.batched_ragged_paged_attention`, Mosaic; the kernel our
`flash_paged` / continuous-batching path calls through `torch_ops.batched_rpa`) at serving shapes: GQA with 8 KV
heads of 128 (Llama 3 8B, Qwen3 8B), pages of 16 or 32 tokens, 64 to 256 sequences mixing decode and prefill in
one step, KV up to 32k tokens a sequence. Forward only (upstream registers no VJP); v5e, v6e and v7x
(upstream's Op: generation >= 5).

The page table lives in SMEM (1 MiB on these chips) beside the kernel's step schedule: 256 sequences of 32k tokens
in 16-token pages (2 MiB of page indices) cannot be served in one call, and our `ops` layer refuses them
(ops/_rpa_smem.py) before the compiler would ("Ran out of memory in memory space smem"); the boundary cases are the
largest page tables it accepts."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, on_chips, spec
from ._models import LLAMA_3_8B, QWEN3_8B, Model


def _build(model: Model, tokens: int, seqs: int, page: int, max_kv: int, cache_tokens: int) -> Any:
    """`tokens` new tokens this step over `seqs` sequences (the scheduler's budget); page tables cover `max_kv`
    tokens a sequence; the cache holds `cache_tokens` (one layer's share of HBM)."""
    def build(kernel: Any, mesh: Any) -> Any:
        hq, hkv, d = model.heads, model.kv_heads, model.head_dim
        specs = [spec(mesh, (tokens, hq, d), jnp.bfloat16), spec(mesh, (tokens, hkv, d), jnp.bfloat16),
                 spec(mesh, (tokens, hkv, d), jnp.bfloat16),
                 spec(mesh, (cache_tokens // page, page, 2 * hkv, d), jnp.bfloat16),
                 spec(mesh, (seqs,), jnp.int32), spec(mesh, (seqs * (max_kv // page),), jnp.int32),
                 spec(mesh, (seqs + 1,), jnp.int32), spec(mesh, (3,), jnp.int32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.batched_ragged_paged_attention(*args, sm_scale=d**-0.5, implementation="mosaic_tpu")
        return forward, specs
    return build


REFUSED = "do not fit the chip's SMEM"

# (model, new tokens a step, sequences, page size, max KV a sequence, cached tokens, tier, expect)
SHAPES = (
    (LLAMA_3_8B, 2048, 64, 16, 32768, 262144, "all", COMPILES),
    (QWEN3_8B, 2048, 256, 32, 16384, 262144, "all", COMPILES),
    (QWEN3_8B, 8192, 128, 32, 32768, 524288, "all", COMPILES),
    # the boundary at 256 sequences in 16-token pages: 576 pages (9,216 tokens) a sequence fit, 592 do not
    (LLAMA_3_8B, 2048, 256, 16, 9216, 262144, "all", COMPILES),
    (LLAMA_3_8B, 2048, 256, 16, 9472, 262144, "default", REFUSED),
    (LLAMA_3_8B, 2048, 256, 16, 32768, 262144, "default", REFUSED),
    (QWEN3_8B, 2048, 256, 32, 32768, 262144, "all", REFUSED),
)


def cases() -> list[Case]:
    out = []
    for model, tokens, seqs, page, max_kv, cache, tier, expect in SHAPES:
        what = "fwd" if expect == COMPILES else "refused"
        name = f"batched_rpa/{model.name}/t{tokens}-seqs{seqs}-page{page}-kv{max_kv}/{what}"
        out += on_chips(lambda chip, name=name, model=model, shape=(tokens, seqs, page, max_kv, cache), tier=tier,
                        expect=expect: Case(name, "batched_rpa", model.name, chip, _build(model, *shape),
                                            expect=expect, tier=tier if chip == "v6e" else "all"))
    return out
