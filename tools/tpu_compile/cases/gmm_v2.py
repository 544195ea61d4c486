"""Upstream's V2 ragged dot (`tokamax.ops.ragged_dot(implementation="mosaic_tpu_v2")`, the `gmm_v2` /
`tgmm_v2` kernels) at MoE experts' shapes, forward and through `jax.grad`, 8,192 tokens routed; and
gmm_v2's fused gate/up activation at inference (forward only, as upstream's VJP does not take it), but
not for gpt-oss-120b, whose 5,760 gate/up columns upstream refuses ("size_n=5760 should be divisible by
2 * num_lanes when fuse_act is enabled") with its own message, which tests/jax/public holds this kernel to."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import COMPILES, KNOWN_COMPILER_ERROR, Case, on_chips, spec
from ._models import DEEPSEEK_V3, GPT_OSS_120B, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

TOKENS = 8192
IMPL = "mosaic_tpu_v2"


def _build(model: Model, k: int, n: int, grad: bool, **kw: Any) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        m = TOKENS * model.experts_per_token
        specs = [spec(mesh, (m, k), jnp.bfloat16), spec(mesh, (model.experts, k, n), jnp.bfloat16),
                 spec(mesh, (model.experts,), jnp.int32)]

        def forward(lhs: Any, rhs: Any, sizes: Any) -> Any:
            return kernel.ops.ragged_dot(lhs, rhs, sizes, implementation=IMPL, **kw)

        if not grad:
            return forward, specs
        return jax.grad(lambda x, w, s: jnp.sum(jnp.square(forward(x, w, s).astype(jnp.float32))),
                        argnums=(0, 1)), specs
    return build


# A known gap: upstream's tiling (`calculate_tiling`) picks 384 x 14336 x 1024 tiles for Mixtral's down projection
# within its VMEM estimate (~109 MiB of the 115.2 MiB limit), which leaves out ~8 MiB of Mosaic's own scratch:
# libtpu reports "CompileTimeScopedVmemOom ... 117.41M and limit 115.20M" on v5e and v6e (128 MiB of VMEM each).
_KNOWN = {("Mixtral-8x7B", "down", chip): KNOWN_COMPILER_ERROR + "CompileTimeScopedVmemOom" for chip in ("v5e", "v6e")}


def _case(chip: str, model: Model, what: str, k: int, n: int, tier: str, grad: bool = True, **kw: Any) -> Case:
    expect = _KNOWN.get((model.name, what, chip), COMPILES) if grad else COMPILES
    return Case(f"gmm_v2/{model.name}/{what}/{'fwd+bwd' if grad else 'fwd'}", "gmm_v2", model.name, chip,
                _build(model, k, n, grad, **kw), tier=tier, expect=expect)


def cases() -> list[Case]:
    out = []
    for model in (QWEN3_30B_A3B, MIXTRAL_8X7B, DEEPSEEK_V3, GPT_OSS_120B):
        for what, (k, n) in (("gate-up", (model.hidden, 2 * model.intermediate)),
                             ("down", (model.intermediate, model.hidden))):
            out += on_chips(lambda chip, model=model, what=what, k=k, n=n: _case(
                chip, model, what, k, n,
                "default" if (model is QWEN3_30B_A3B and what == "gate-up" and chip == "v6e") else "all"))
        if (2 * model.intermediate) % (2 * 128) == 0:
            out += on_chips(lambda chip, model=model: _case(
                chip, model, "gate-up-silu", model.hidden, 2 * model.intermediate, "all", grad=False,
                fuse_gateup_activation="silu"))
    return out
