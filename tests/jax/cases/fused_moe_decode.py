"""Fused MoE decode (`fused_moe_decode`): one rank (n_ranks=1) against an independent jnp reference.

The kernel signals and copies to its peers, so it must run under shard_map: the call maps it over the ambient
one-device mesh (the abstract TPU mesh when lowering) or over one CPU device (interpret mode).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from . import Case, rng

KERNEL = "_src.ops.experimental.fused_moe_decode.fused_moe_decode_kernel"
F8 = jnp.float8_e4m3fn
F8_MAX = 448.0
H, INTER, INTER_S, E = 512, 256, 128, 8  # hidden, routed and shared intermediate slices, local experts


def _quantize(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """FP8 weights with f32 scales per output channel (max over `axis`, the input axis)."""
    s = np.abs(w).max(axis=axis, keepdims=True) / F8_MAX
    return (w / s).astype(F8), s.astype(np.float32)


def _inputs(seed: int, tokens: int, k: int, n_global: int, gated: bool) -> tuple[np.ndarray, ...]:
    """Routes to distinct global experts; the last token has zero route weights (a padding row)."""
    r = rng(seed)
    w1, w1_scale = _quantize(r.standard_normal((E, H, 2 * INTER), np.float32) * H**-0.5, 1)
    w2, w2_scale = _quantize(r.standard_normal((E, INTER, H), np.float32) * INTER**-0.5, 1)
    sw1, sw1_scale = _quantize(r.standard_normal((H, 2 * INTER_S), np.float32) * H**-0.5, 0)
    sw2, sw2_scale = _quantize(r.standard_normal((INTER_S, H), np.float32) * INTER_S**-0.5, 0)
    hidden = r.standard_normal((tokens, H), np.float32).astype(jnp.bfloat16)
    gate = [(r.standard_normal((H, 1), np.float32) * H**-0.5).astype(jnp.bfloat16)] if gated else []
    ids = np.stack([r.choice(n_global, k, replace=False) for _ in range(tokens)]).astype(np.int32)
    topk_weights = r.dirichlet(np.ones(k), size=tokens).astype(np.float32)
    topk_weights[-1] = 0
    return (np.zeros((1,), np.int32), hidden, w1, w2, w1_scale[:, :, None, :], w2_scale[:, :, None, :],
            sw1, sw1_scale, sw2, sw2_scale, *gate, topk_weights.astype(jnp.bfloat16), ids)


def _on_one_rank(fn):  # noqa: ANN001, ANN202
    def run(*args):  # noqa: ANN002, ANN202
        mesh = jax.sharding.get_abstract_mesh()
        if mesh.empty:
            mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("x",))
        return jax.shard_map(fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(),
                             check_vma=False)(*args)

    return run


def _call(get, gated: bool, **kw):  # noqa: ANN001, ANN202
    kernel = functools.partial(get(KERNEL).fused_moe_decode, n_ranks=1, **kw)
    if gated:
        return _on_one_rank(kernel)
    return _on_one_rank(lambda *a: kernel(*a[:10], None, *a[10:]))


def _fp8_dequant_rows(x, block: int):  # noqa: ANN001, ANN202
    """x [m, n] f32 -> the values after FP8 quantization with one scale per row per `block` columns."""
    m, n = x.shape
    xb = x.reshape(m, n // block, block)
    s = jnp.max(jnp.abs(xb), axis=2, keepdims=True) / F8_MAX
    q = (xb * jnp.where(s == 0, 0.0, 1.0 / s)).astype(F8).astype(jnp.float32)
    return (q * s).reshape(m, n)


def _reference(expert_start: int = 0, routed_scale: float = 1.0, act_block: int = 512):  # noqa: ANN202
    """Dense f32 MoE over the dequantized FP8 weights, with the kernel's documented activation numerics: hidden
    states FP8 per row per 512 columns, the activated intermediate FP8 per row per `act_block` columns."""

    def expert(x, w1, w1_scale, w2, w2_scale, coeff):  # noqa: ANN001, ANN202
        a = x @ (w1.astype(jnp.float32) * w1_scale)
        width = a.shape[1] // 2
        mid = jax.nn.silu(a[:, :width]) * a[:, width:] * coeff
        mid = _fp8_dequant_rows(mid, min(act_block, width))
        return mid @ (w2.astype(jnp.float32) * w2_scale)

    def ref(rank, hidden, w1, w2, w1_scale, w2_scale, sw1, sw1_scale, sw2, sw2_scale, *rest):  # noqa: ANN001, ANN202
        del rank
        gate_w, topk_weights, topk_ids = rest if len(rest) == 3 else (None, *rest)
        h = hidden.astype(jnp.float32)
        x = _fp8_dequant_rows(h, 512)
        gate = (jnp.ones((h.shape[0], 1)) if gate_w is None
                else jax.nn.sigmoid(h @ gate_w.astype(jnp.float32)))
        out = expert(x, sw1, sw1_scale, sw2, sw2_scale, gate)
        route = topk_weights.astype(jnp.float32) * routed_scale
        for e in range(w1.shape[0]):
            coeff = jnp.sum(jnp.where(topk_ids == expert_start + e, route, 0.0), axis=1, keepdims=True)
            out = out + expert(x, w1[e], w1_scale[e, 0], w2[e], w2_scale[e, 0], coeff)
        return out.astype(jnp.bfloat16)

    return jax.jit(ref)


_WHY = ("FP8 weights and activations on both sides, quantized alike (the reference mirrors the documented per-row "
        "per-block activation scales), f32 accumulation, bf16 output (|out| < ~5, ulp <= 3e-2): seen within one bf16 "
        "ulp (<= 1e-3). The margin covers an intermediate on an FP8 rounding boundary rounding one step apart under "
        "another summation order; still tight enough that a 128- vs 256-column activation block (error ~4e-2) or "
        "no activation quantization (~0.1) fails.")

# Upstream supports this kernel on TPU v7 and later only (`supported_on`: generation >= 7; FP8 x FP8 on the MXU).
CASES = [
    Case(
        id="fused_moe_decode/tp-whole-gated-t7-k3-e8",
        # Whole experts through the default ring of 6 slots, refilled (8 active experts); 7 tokens padded to 16.
        call=lambda get: _call(get, gated=True),
        inputs=lambda: _inputs(0, tokens=7, k=3, n_global=E, gated=True),
        reference=lambda get: _reference(act_block=512),
        tolerance=(1e-2, 1e-2),
        tolerance_why=_WHY,
        chips=("v7x",),
        interpret_chip="v7x",
    ),
    Case(
        id="fused_moe_decode/ep-blocked128-ungated-scale2.5-t6-k3",
        # Expert parallelism: this rank holds global experts [8, 16) of 24 (4 active); each expert streams as two
        # 128-wide blocks through a 3-slot ring; no shared-expert gate, routed experts scaled by 2.5.
        call=lambda get: _call(get, gated=False, expert_start=8, routed_scale=2.5, i_block=128, num_buffers=3),
        inputs=lambda: _inputs(1, tokens=6, k=3, n_global=3 * E, gated=False),
        reference=lambda get: _reference(expert_start=8, routed_scale=2.5, act_block=128),
        tolerance=(1e-2, 1e-2),
        tolerance_why=_WHY,
        chips=("v7x",),
        interpret_chip="v7x",
    ),
]
