"""Upstream's SparseCore top-k (`tokamax.ops.top_k`; no VJP) as a sampler uses it: the top 64 of a
batch of 128 rows of logits over Llama 3's 128,256, Qwen3's 151,936 and gpt-oss's 201,088
vocabularies, with the scores returned. TPU7x only (its 16 SparseCore lanes), as upstream."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._models import GPT_OSS_120B, LLAMA_3_8B, QWEN3_8B, Model

BATCH, K = 128, 64


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        return (lambda logits: kernel.ops.top_k(logits, K, return_scores=True, implementation="mosaic_tpu"),
                [spec(mesh, (BATCH, model.vocab), jnp.float32)])
    return build


def cases() -> list[Case]:
    return [Case(f"topk/{model.name}/b{BATCH}-v{model.vocab}-k{K}/fwd", "topk", model.name, "v7x", _build(model),
                 tier="default" if model is LLAMA_3_8B else "all")
            for model in (LLAMA_3_8B, QWEN3_8B, GPT_OSS_120B)]
