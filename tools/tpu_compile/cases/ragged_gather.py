"""Upstream's SparseCore ragged gather (`tokamax.ops.ragged_gather`; no VJP) as an MoE dispatch: each
of 8,192 tokens' rows gathered once per routed expert (DeepSeek-V3: 8 of 7,168; Qwen3-30B-A3B: 8 of
2,048; gpt-oss-120b: 4 of 2,880), bf16. Upstream's Op admits v6e and TPU7x (v5e has no SparseCore)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, QWEN3_30B_A3B, Model

TOKENS = 8192


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (TOKENS, model.hidden), jnp.bfloat16),
                 spec(mesh, (TOKENS * model.experts_per_token,), jnp.int32),
                 spec(mesh, (1,), jnp.int32), spec(mesh, (1,), jnp.int32)]
        return (lambda x, indices, start, end: kernel.ops.ragged_gather(x, indices, start, end,
                                                                        implementation="mosaic")), specs
    return build


def cases() -> list[Case]:
    out = []
    for model in (DEEPSEEK_V3, QWEN3_30B_A3B, GPT_OSS_120B):
        out += on_chips(lambda chip, model=model: Case(
            f"ragged_gather/{model.name}/t{TOKENS}-k{model.experts_per_token}-h{model.hidden}/fwd",
            "ragged_gather", model.name, chip, _build(model),
            tier="default" if (model is DEEPSEEK_V3 and chip == "v7x") else "all"), chips=("v6e", "v7x"))
    return out
