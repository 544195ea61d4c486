"""Upstream's SparseCore ragged gather (`tokamax.ops.ragged_gather`; no VJP) as an MoE dispatch: each
of 8,192 tokens' rows gathered once per routed expert (DeepSeek-V3: 8 of 7,168; Qwen3-30B-A3B: 8 of
2,048), bf16. Upstream's Op admits v6e and TPU7x (v5e has no SparseCore). gpt-oss-120b's 2,880 is
off the 128 lanes the kernel's column chunks need: refused by this kernel (Mosaic rejected the lowered
gather), with the same rows padded to 2,944 as the boundary that compiles."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, QWEN3_30B_A3B, Model

TOKENS = 8192
PADDED = 2944  # gpt-oss-120b's 2,880 rounded up to the lanes
REFUSED = "hidden size (2880) must be a multiple of 128"


def _build(model: Model, hidden: int = 0) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (TOKENS, hidden or model.hidden), jnp.bfloat16),
                 spec(mesh, (TOKENS * model.experts_per_token,), jnp.int32),
                 spec(mesh, (1,), jnp.int32), spec(mesh, (1,), jnp.int32)]
        return (lambda x, indices, start, end: kernel.ops.ragged_gather(x, indices, start, end,
                                                                        implementation="mosaic")), specs
    return build


def cases() -> list[Case]:
    out = []
    for model, hidden, expect in ((DEEPSEEK_V3, 0, COMPILES), (QWEN3_30B_A3B, 0, COMPILES),
                                  (GPT_OSS_120B, 0, REFUSED), (GPT_OSS_120B, PADDED, COMPILES)):
        out += on_chips(lambda chip, model=model, hidden=hidden, expect=expect: Case(
            f"ragged_gather/{model.name}/t{TOKENS}-k{model.experts_per_token}-h{hidden or model.hidden}/fwd",
            "ragged_gather", model.name, chip, _build(model, hidden), expect=expect,
            tier="default" if (model is DEEPSEEK_V3 and chip == "v7x") else "all"), chips=("v6e", "v7x"))
    return out
