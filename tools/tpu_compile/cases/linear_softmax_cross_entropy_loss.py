"""Upstream's fused linear softmax cross-entropy (`tokamax.ops.linear_softmax_cross_entropy_loss`,
Mosaic) at LM heads' shapes: 8,192 tokens against Llama 3's 128,256 and Qwen3's 151,936 vocabularies
(and gpt-oss's 201,088), forward and through `jax.grad` (upstream's VJP kernel), bf16 weights."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import GPT_OSS_120B, LLAMA_3_8B, QWEN3_8B, Model

TOKENS = 8192
FAMILY = "linear_softmax_cross_entropy_loss"


def _build(model: Model, grad: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (TOKENS, model.hidden), jnp.bfloat16), spec(mesh, (TOKENS,), jnp.int32),
                 spec(mesh, (model.hidden, model.vocab), jnp.bfloat16)]

        def loss(x: Any, w: Any, labels: Any) -> Any:
            return kernel.ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean",
                                                                implementation="mosaic_tpu")

        if not grad:
            return (lambda x, labels, w: loss(x, w, labels)), specs
        return (lambda x, labels, w: jax.grad(loss, argnums=(0, 1))(x, w, labels)), specs
    return build


def cases() -> list[Case]:
    out = []
    for model in (LLAMA_3_8B, QWEN3_8B, GPT_OSS_120B):
        for grad in (True, False):
            out += on_chips(lambda chip, model=model, grad=grad: Case(
                f"{FAMILY}/{model.name}/{'fwd+bwd' if grad else 'fwd'}", FAMILY, model.name, chip,
                _build(model, grad),
                tier="default" if (model is LLAMA_3_8B and grad and chip == "v6e") else "all"))
    return out
