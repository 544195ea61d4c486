"""Upstream's ragged dot (`tokamax.ops.ragged_dot`, Mosaic) at MoE experts' shapes: gate/up and down
projections, forward and through `jax.grad`, 8,192 tokens routed."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V3, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

TOKENS = 8192


def _build(model: Model, k: int, n: int, grad: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        m = TOKENS * model.experts_per_token
        specs = [spec(mesh, (m, k), jnp.bfloat16), spec(mesh, (model.experts, k, n), jnp.bfloat16),
                 spec(mesh, (model.experts,), jnp.int32)]

        def forward(lhs: Any, rhs: Any, sizes: Any) -> Any:
            return kernel.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic")

        if not grad:
            return forward, specs
        return jax.grad(lambda x, w, s: jnp.sum(jnp.square(forward(x, w, s).astype(jnp.float32))),
                        argnums=(0, 1)), specs
    return build


def cases() -> list[Case]:
    out = []
    for model, tier in ((MIXTRAL_8X7B, "default"), (QWEN3_30B_A3B, "default"), (DEEPSEEK_V3, "all")):
        for what, (k, n) in (("gate-up", (model.hidden, 2 * model.intermediate)),
                             ("down", (model.intermediate, model.hidden))):
            out += on_chips(lambda chip, model=model, what=what, k=k, n=n, tier=tier: Case(
                f"ragged_dot/{model.name}/{what}/fwd+bwd", "ragged_dot", model.name, chip,
                _build(model, k, n, grad=True), tier=tier if what == "gate-up" else "all"))
    return out
