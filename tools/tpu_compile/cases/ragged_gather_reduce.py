"""Upstream's SparseCore ragged gather reduce (`tokamax.ops.ragged_gather_reduce`; no VJP) as an MoE
combine: 8,192 tokens' expert outputs (tokens x top-k rows) weighted and summed back per token, bf16
(DeepSeek-V3: 8 of 7,168; Qwen3-30B-A3B: 8 of 2,048). TPU7x only (the 16 SparseCore lanes the kernel
needs), as upstream. gpt-oss-120b's 2,880 is off the 128 lanes: refused by this kernel (upstream's
kernel refused it too, without naming itself), its rows padded to 2,944 the boundary that compiles."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, QWEN3_30B_A3B, Model

TOKENS = 8192
PADDED = 2944  # gpt-oss-120b's 2,880 rounded up to the lanes
REFUSED = "hidden size (2880) must be a multiple of 128"


def _build(model: Model, hidden: int = 0) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        routes = TOKENS * model.experts_per_token
        specs = [spec(mesh, (routes, hidden or model.hidden), jnp.bfloat16), spec(mesh, (routes,), jnp.int32),
                 spec(mesh, (routes,), jnp.bfloat16), spec(mesh, (routes,), jnp.bool_)]
        return (lambda x, i, w, m: kernel.ops.ragged_gather_reduce(x, i, w, m, model.experts_per_token,
                                                                   implementation="mosaic_tpu")), specs
    return build


def cases() -> list[Case]:
    return [Case(f"ragged_gather_reduce/{model.name}/t{TOKENS}-k{model.experts_per_token}-h{hidden or model.hidden}"
                 "/fwd", "ragged_gather_reduce", model.name, "v7x", _build(model, hidden), expect=expect,
                 tier="default" if model is DEEPSEEK_V3 else "all")
            for model, hidden, expect in ((DEEPSEEK_V3, 0, COMPILES), (QWEN3_30B_A3B, 0, COMPILES),
                                          (GPT_OSS_120B, 0, REFUSED), (GPT_OSS_120B, PADDED, COMPILES))]
