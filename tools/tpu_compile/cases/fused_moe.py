"""Upstream's experimental fused MoE (`fused_moe(implementation="mosaic_tpu")`: routing, both expert
projections and the combine in one expert-parallel kernel; no VJP) on one chip, at MoE models' shapes:
bf16 weights, and fp8 weights with per-channel scales. Upstream's Op runs it on v5e and newer."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

API = "_ported._src.ops.experimental.fused_moe.api"
TOKENS = 2048


def _build(model: Model, weights: Any) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        import importlib

        api = importlib.import_module(f"{kernel.__name__}.{API}")
        e, h, i = model.experts, model.hidden, model.intermediate
        specs = [spec(mesh, (TOKENS, h), jnp.bfloat16), spec(mesh, (e, h, 2 * i), weights),
                 spec(mesh, (e, i, h), weights), spec(mesh, (TOKENS, e), jnp.float32)]
        if weights != jnp.bfloat16:
            specs += [spec(mesh, (e, 2 * i), jnp.float32), spec(mesh, (e, h), jnp.float32)]

        def call(x: Any, w1: Any, w2: Any, gating: Any, *scales: Any) -> Any:
            w1_scale, w2_scale = scales or (None, None)
            return api.fused_moe(x, w1, w2, gating, w1_scale=w1_scale, w2_scale=w2_scale,
                                 topk=model.experts_per_token, mesh=mesh, implementation="mosaic_tpu")
        return call, specs
    return build


def cases() -> list[Case]:
    out = []
    for model in (QWEN3_30B_A3B, MIXTRAL_8X7B, GPT_OSS_120B, DEEPSEEK_V3):
        for name, weights in (("bf16", jnp.bfloat16), ("fp8", jnp.float8_e4m3fn)):
            out += on_chips(lambda chip, model=model, name=name, weights=weights: Case(
                f"fused_moe/{model.name}/{name}-t{TOKENS}/fwd", "fused_moe", model.name, chip,
                _build(model, weights),
                tier="default" if (model is QWEN3_30B_A3B and name == "bf16" and chip == "v6e") else "all"))
    return out
