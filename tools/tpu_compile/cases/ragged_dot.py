"""Upstream's ragged dot (`tokamax.ops.ragged_dot`, Mosaic) at MoE experts' shapes: gate/up and down
projections, forward and through `jax.grad`, 8,192 tokens routed.

And the chip benchmark's expert projections (`tools/chip/models.py` EXPERTS: Mixtral 8x7B, OLMoE,
Qwen3-30B-A3B, gpt-oss-20b, one chip's share of DeepSeek-V3), forward and forward+backward, bf16 (issue 51):
before TPU7x these calls get `tokamax.moe.tiles`' tiles (no tuned-table entry), which must fit the compiler's
scoped VMEM on each chip; tests/tpu_compile/test_ragged_dot_tiles.py reads the tiles each call lowered with.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ...chip.models import EXPERTS, Experts
from ..case import COMPILES, KNOWN_COMPILER_ERROR, Case, on_chips, spec
from ._models import DEEPSEEK_V3, MIXTRAL_8X7B, QWEN3_30B_A3B, Model

TOKENS = 8192


def _ragged(m: int, k: int, n: int, groups: int, grad: bool) -> Any:
    """lhs [m, k] x rhs [groups, k, n], bf16: the forward, or `jax.grad` of a loss w.r.t. lhs and rhs."""
    def build(kernel: Any, mesh: Any) -> Any:
        specs = [spec(mesh, (m, k), jnp.bfloat16), spec(mesh, (groups, k, n), jnp.bfloat16),
                 spec(mesh, (groups,), jnp.int32)]

        def forward(lhs: Any, rhs: Any, sizes: Any) -> Any:
            return kernel.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic")

        if not grad:
            return forward, specs
        return jax.grad(lambda x, w, s: jnp.sum(jnp.square(forward(x, w, s).astype(jnp.float32))),
                        argnums=(0, 1)), specs
    return build


def _build(model: Model, k: int, n: int, grad: bool) -> Any:
    return _ragged(TOKENS * model.experts_per_token, k, n, model.experts, grad)


# ---- issue 51: the chip benchmark's expert projections, on the tiles the rule chooses ----

EXPERT_MODELS = {  # EXPERTS' model -> the name in case ids
    "Mixtral 8x7B": "Mixtral-8x7B",
    "OLMoE": "OLMoE",
    "Qwen3-30B-A3B": "Qwen3-30B-A3B",
    "gpt-oss-20b": "gpt-oss-20b",
    "DeepSeek-V3, one chip's 8 experts": "DeepSeek-V3",
}
# Each compiles in 2-13 s: in ./test.sh every forward+backward, and the forward of Mixtral (the widest) and
# gpt-oss (hidden 2880, off the 128 lanes); the other forwards (the same gmm call) under --all.
ALL_TIER_FORWARDS = {"OLMoE", "Qwen3-30B-A3B", "DeepSeek-V3, one chip's 8 experts"}
CHIPS = ("v5e", "v6e", "v7x")
# TPU7x keeps upstream's heuristic, whose tgmm tiles for OLMoE's backward (1024 x 2048 x 1024) need 35.37M of the
# 32M scoped VMEM (libtpu: "CompileTimeScopedVmemOom"): the port's hook gives such a tgmm the rule's tiles.
_KNOWN: dict[tuple[str, bool, str], str] = {}


def expert_id(shape: Experts, grad: bool) -> str:
    return (f"ragged_dot/{EXPERT_MODELS[shape.model]}/experts-m{shape.rows}-k{shape.hidden}-n{shape.out}"
            f"-g{shape.experts}/{'fwd+bwd' if grad else 'fwd'}")


def expert_cases() -> list[tuple[Case, Experts, bool]]:
    """(case, its shape, whether it differentiates) for each EXPERTS shape, forward and forward+backward, on
    v5e, v6e and v7x."""
    out = []
    for shape in EXPERTS:
        for grad in (False, True):
            tier = "all" if not grad and shape.model in ALL_TIER_FORWARDS else "default"
            build = _ragged(shape.rows, shape.hidden, shape.out, shape.experts, grad)
            out += [(Case(expert_id(shape, grad), "ragged_dot", shape.model, chip, build,
                          _KNOWN.get((shape.model, grad, chip), COMPILES), tier), shape, grad) for chip in CHIPS]
    return out


OUT_OF_HBM = {("DeepSeek-V3", "gate-up", "v5e"): KNOWN_COMPILER_ERROR + "CompileTimeHbmOom"}
"""Cases no one chip of the kind holds: DeepSeek-V3's 256 experts' gate/up weights are 15 GB in bf16 and their
gradient as much again (libtpu asks 30.25G of the v5e's 15.75G); the v6e's and v7x's HBM hold them."""


def cases() -> list[Case]:
    out = []
    for model, tier in ((MIXTRAL_8X7B, "default"), (QWEN3_30B_A3B, "default"), (DEEPSEEK_V3, "all")):
        for what, (k, n) in (("gate-up", (model.hidden, 2 * model.intermediate)),
                             ("down", (model.intermediate, model.hidden))):
            out += on_chips(lambda chip, model=model, what=what, k=k, n=n, tier=tier: Case(
                f"ragged_dot/{model.name}/{what}/fwd+bwd", "ragged_dot", model.name, chip,
                _build(model, k, n, grad=True), OUT_OF_HBM.get((model.name, what, chip), COMPILES),
                tier=tier if what == "gate-up" else "all"))
    # gpt-oss-like experts of 2880 -> 1440 (the chip check's shape): the rule's tiles (256 x 1024 x 1440) put the
    # weights' columns off the lanes, where Mosaic refused gmm's lookahead fetch on the v5e ("Offsets along tiled
    # dimensions must be aligned to tiles"); the hook turns the lookahead off there
    out += on_chips(lambda chip: Case("ragged_dot/gpt-oss-like/experts-m1024-k2880-n1440-g32/fwd+bwd", "ragged_dot",
                                      "gpt-oss-like", chip, _ragged(1024, 2880, 1440, 32, grad=True)), ("v5e",))
    return out + [case for case, _, _ in expert_cases()]
