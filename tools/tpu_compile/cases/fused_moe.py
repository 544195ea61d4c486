"""Upstream's experimental fused MoE (`fused_moe(implementation="mosaic_tpu")`: routing, both expert
projections and the combine in one expert-parallel kernel; no VJP) on one chip, at MoE models' shapes:
bf16 weights, and fp8 weights with per-channel scales. Upstream's Op runs it on v5e and newer; DeepSeek-V3's
256 experts (22.5 GB in bf16, 11.3 GB in fp8) only on the chips whose HBM holds them. The kernel refuses
(by name, `ops.experimental.fused_moe`) experts whose weight slabs overflow its VMEM budget: Mixtral's on
every chip, DeepSeek-V3's bf16 ones on TPU7x (64 MiB), and gpt-oss-120b's hidden 2,880 (off the lanes);
gpt-oss's experts with the hidden padded to 2,944 are the boundary that compiles."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import COMPILES, Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

TOKENS = 2048
FP8 = jnp.float8_e4m3fn
ALL = ("v5e", "v6e", "v7x")
PADDED = 2944  # gpt-oss-120b's hidden 2,880 rounded up to the lanes
TOO_BIG = "the kernel's VMEM buffers need"
OFF_LANES = "hidden 2880 is not between one and 64 whole 128-lane blocks"


def _build(model: Model, weights: Any, hidden: int = 0, inter: int = 0, experts: int = 0) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        e, h, i = experts or model.experts, hidden or model.hidden, inter or model.intermediate
        specs = [spec(mesh, (TOKENS, h), jnp.bfloat16), spec(mesh, (e, h, 2 * i), weights),
                 spec(mesh, (e, i, h), weights), spec(mesh, (TOKENS, e), jnp.float32)]
        if weights != jnp.bfloat16:
            specs += [spec(mesh, (e, 2 * i), jnp.float32), spec(mesh, (e, h), jnp.float32)]

        def call(x: Any, w1: Any, w2: Any, gating: Any, *scales: Any) -> Any:
            w1_scale, w2_scale = scales or (None, None)
            return kernel.ops.experimental.fused_moe(x, w1, w2, gating, w1_scale=w1_scale, w2_scale=w2_scale,
                                                     topk=model.experts_per_token, mesh=mesh,
                                                     implementation="mosaic_tpu")
        return call, specs
    return build


def cases() -> list[Case]:
    out = []
    for model, name, weights, hidden, chips, expect in (
            (QWEN3_30B_A3B, "bf16", jnp.bfloat16, 0, ALL, COMPILES), (QWEN3_30B_A3B, "fp8", FP8, 0, ALL, COMPILES),
            (MIXTRAL_8X7B, "bf16", jnp.bfloat16, 0, ALL, TOO_BIG), (MIXTRAL_8X7B, "fp8", FP8, 0, ALL, TOO_BIG),
            (GPT_OSS_120B, "bf16", jnp.bfloat16, 0, ALL, OFF_LANES), (GPT_OSS_120B, "fp8", FP8, 0, ALL, OFF_LANES),
            (GPT_OSS_120B, "bf16", jnp.bfloat16, PADDED, ALL, COMPILES),
            (DEEPSEEK_V3, "bf16", jnp.bfloat16, 0, ("v6e",), COMPILES),
            (DEEPSEEK_V3, "bf16", jnp.bfloat16, 0, ("v7x",), TOO_BIG),
            (DEEPSEEK_V3, "fp8", FP8, 0, ("v6e", "v7x"), COMPILES)):
        out += on_chips(lambda chip, model=model, name=name, weights=weights, hidden=hidden, expect=expect: Case(
            f"fused_moe/{model.name}/{name}-t{TOKENS}{f'-h{hidden}' if hidden else ''}/fwd", "fused_moe", model.name,
            chip, _build(model, weights, hidden), expect=expect,
            tier="default" if (model is QWEN3_30B_A3B and name == "bf16" and chip == "v6e") else "all"), chips)
    return out
