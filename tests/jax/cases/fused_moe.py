"""Experimental fused expert-parallel MoE (`fused_ep_moe_v2`): routing, expert FFN and combine, on one EP shard.

The layer builds its own `shard_map` over the mesh it is given: the abstract TPU mesh when lowering, a one-device
CPU mesh in interpret mode. Upstream's Op runs it on TPU v5e and newer (`generation >= 5`), so every chip (its
host module notes generation 7 as the oldest it was measured on, but nothing enforces that). The reference is
upstream's pure-JAX `fused_moe_reference` (softmax router, top-k, dense per-expert FFN in f32).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

LAYER = "_src.ops.experimental.fused_moe.layer"
HOST = "_src.ops.experimental.fused_moe.host"
REFERENCE = "_src.ops.experimental.fused_moe.reference"
CHIPS = ("v5e", "v6e", "v7x")
AXIS = "ep"
TOKENS, HIDDEN, INTER, EXPERTS, TOPK = 32, 256, 256, 4, 2


def _inputs() -> tuple[np.ndarray, ...]:
    r = rng(TOKENS + HIDDEN + EXPERTS)
    x = r.standard_normal((TOKENS, HIDDEN), np.float32).astype(jnp.bfloat16)
    w1 = (r.standard_normal((EXPERTS, HIDDEN, 2 * INTER), np.float32) / 16).astype(jnp.bfloat16)
    w2 = (r.standard_normal((EXPERTS, INTER, HIDDEN), np.float32) / 16).astype(jnp.bfloat16)
    gating = r.standard_normal((TOKENS, EXPERTS), np.float32)
    return x, w1, w2, gating


def _fp8_inputs() -> tuple[np.ndarray, ...]:
    """The same weights quantized to fp8 e4m3 with one f32 scale per (expert, output channel)."""
    x, w1, w2, gating = _inputs()

    def quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = np.asarray(w, np.float32)
        scale = np.abs(w).max(axis=1) / 448.0  # e4m3's largest finite value
        return (w / scale[:, None, :]).astype(jnp.float8_e4m3fn), scale.astype(np.float32)

    (w1_q, w1_scale), (w2_q, w2_scale) = quantize(w1), quantize(w2)
    return x, w1_q, w2_q, gating, w1_scale, w2_scale


def _mesh():  # noqa: ANN202
    mesh = jax.sharding.get_abstract_mesh()
    return jax.sharding.Mesh(np.array(jax.devices()[:1]), (AXIS,)) if mesh.empty else mesh


def _call(get, fmt: str):  # noqa: ANN001, ANN202
    def f(x, w1, w2, gating, w1_scale=None, w2_scale=None):  # noqa: ANN001, ANN202
        return get(LAYER).fused_ep_moe_v2(x, w1, w2, w1_scale, w2_scale, gating, topk=TOPK, renormalize=True,
                                          mesh=_mesh(), capacity=128, weight_format=get(HOST).WeightFormat(fmt))

    return f


def _reference(get):  # noqa: ANN001, ANN202
    def f(x, w1, w2, gating, w1_scale=None, w2_scale=None):  # noqa: ANN001, ANN202
        return get(REFERENCE).fused_moe_reference(x, w1, w2, gating, w1_scale=w1_scale, w2_scale=w2_scale,
                                                  topk=TOPK, renormalize=True)

    return f


CASES = [
    Case(
        id=f"fused_moe/bf16-ep1-t{TOKENS}-h{HIDDEN}-i{INTER}-e{EXPERTS}-top{TOPK}",
        call=lambda get: _call(get, "bf16"),
        inputs=_inputs,
        reference=_reference,
        tolerance=(2e-2, 2e-2),
        tolerance_why="bf16 rows and weights, f32 accumulation, bf16 intermediate and output (reference keeps the "
                      "intermediate in f32): outputs up to ~2 at 1-2 bf16 ulp",
        chips=CHIPS,
        interpret_chip="v7x",
        mesh=(AXIS, 1),
    ),
    Case(
        id=f"fused_moe/fp8-ep1-t{TOKENS}-h{HIDDEN}-i{INTER}-e{EXPERTS}-top{TOPK}",
        call=lambda get: _call(get, "fp8"),
        inputs=_fp8_inputs,
        reference=_reference,
        tolerance=(0.1, 0.2),
        tolerance_why="the kernel quantizes token rows and the intermediate to fp8 e4m3 (3 mantissa bits: up to 2^-4 "
                      "relative per element) where the reference keeps them in f32; outputs up to ~2",
        chips=CHIPS,
        interpret_chip="v7x",
        mesh=(AXIS, 1),
    ),
]
