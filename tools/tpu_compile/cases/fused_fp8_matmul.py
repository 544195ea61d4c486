"""Upstream's fused FP8 matmul (`ops.experimental.tpu.FusedFp8Matmul`: the Op quantizes the weight per
column and the activations per row, the MXU multiplies in fp8) at dense MLP shapes, 8,192 tokens, forward
and through `jax.grad` (upstream's VJP Op: its dLHS kernel, dRHS in XLA). TPU7x only, the one chip with
an fp8 MXU (upstream's `fp8_matmul_supported_on`)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, spec
from ._calls import grad_of_square
from ._models import LLAMA_3_8B, LLAMA_3_70B, Model

TOKENS = 8192


def _build(k: int, n: int, grad: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (TOKENS, k), jnp.bfloat16), spec(mesh, (k, n), jnp.bfloat16)]

        def forward(lhs: Any, rhs: Any) -> Any:
            return kernel.ops.experimental.tpu.FusedFp8Matmul()(lhs, rhs)

        return (grad_of_square(forward, (0, 1)) if grad else forward), specs
    return build


def _shapes(model: Model) -> dict[str, tuple[int, int]]:
    return {"up": (model.hidden, model.intermediate), "down": (model.intermediate, model.hidden)}


def cases() -> list[Case]:
    return [Case(f"fused_fp8_matmul/{model.name}/{what}-{k}x{n}/{'fwd+bwd' if grad else 'fwd'}", "fused_fp8_matmul",
                 model.name, "v7x", _build(k, n, grad),
                 tier="default" if (model is LLAMA_3_8B and what == "up" and grad) else "all")
            for model in (LLAMA_3_8B, LLAMA_3_70B) for what, (k, n) in _shapes(model).items()
            for grad in (True, False)]
