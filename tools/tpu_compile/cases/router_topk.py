"""Upstream's MoE router top-k (`tokamax.ops.router_topk`, Mosaic; no VJP) over 8,192 tokens' router
scores: DeepSeek-V3's 256 experts top-8, Qwen3-30B-A3B's 128 top-8, gpt-oss-120b's 128 top-4 and
Mixtral's 8 top-2. Upstream runs it on v6e and TPU7x (generation 6 and newer)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

TOKENS = 8192


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        return (lambda scores: kernel.ops.router_topk(scores, model.experts_per_token, implementation="mosaic_tpu"),
                [spec(mesh, (TOKENS, model.experts), jnp.float32)])
    return build


def cases() -> list[Case]:
    out = []
    for model in (DEEPSEEK_V3, QWEN3_30B_A3B, GPT_OSS_120B, MIXTRAL_8X7B):
        out += on_chips(lambda chip, model=model: Case(
            f"router_topk/{model.name}/t{TOKENS}-e{model.experts}-k{model.experts_per_token}/fwd", "router_topk",
            model.name, chip, _build(model),
            tier="default" if (model is DEEPSEEK_V3 and chip == "v7x") else "all"), chips=("v6e", "v7x"))
    return out
