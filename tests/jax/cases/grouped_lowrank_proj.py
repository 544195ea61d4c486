"""DeepSeek-V4 reverse-RoPE `wo_a` projection (`fused_reverse_rope_wo_a_projection`, `wo_a_projection`)."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.grouped_lowrank_proj.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.grouped_lowrank_proj.reference"

# Upstream only supports and tests these kernels on TPU7x (`supported_on`: generation >= 7; the
# kernel tests skip below 7), so v7x is the only chip lowered and emulated.
CHIPS = ("v7x",)
HEADS_PER_GROUP = 8  # the kernel asserts heads_per_group == SUBLANE


def _inputs(num_tokens: int, num_groups: int, lora_rank: int, head_dim: int, *, rotary_dim: int = 64,
            max_position: int = 64, seed: int = 0) -> tuple[np.ndarray, ...]:
    """`(x, positions, cos_sin_cache, wo_a, wo_a_scale)` with x in the kernel's `(T, G * H, head_dim)` view."""
    r = rng(seed)
    x = r.standard_normal((num_tokens, num_groups * HEADS_PER_GROUP, head_dim), np.float32).astype(jnp.bfloat16)
    positions = r.integers(0, max_position, size=(num_tokens,)).astype(np.int32)
    freqs = r.uniform(0.0, 2.0 * np.pi, (max_position, rotary_dim // 2)).astype(np.float32)
    cos_sin_cache = np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32)
    wo_a = r.standard_normal((HEADS_PER_GROUP * head_dim, num_groups * lora_rank), np.float32)
    wo_a_scale = r.uniform(0.5, 1.5, size=num_groups * lora_rank).astype(np.float32)
    return x, positions, cos_sin_cache, wo_a.astype(jnp.float8_e4m3fn), wo_a_scale


def _fused(get, **kw):  # noqa: ANN001, ANN202
    kernel = get(KERNEL).fused_reverse_rope_wo_a_projection
    return lambda x, *rest: kernel(x, *rest, head_dim=x.shape[-1], **kw)


def _wo_a_inputs(num_tokens: int, num_groups: int, lora_rank: int, head_dim: int,
                 seed: int) -> tuple[np.ndarray, ...]:
    """`(x, wo_a, wo_a_scale, cos_sin, positions, cos_sin_cache)`: `cos_sin` is the kernel's per-token table
    (`gather_cos_sin`'s output for the inverse rotation) built in numpy; the kernel ignores the last two,
    which only the reference reads."""
    x, positions, cache, wo_a, wo_a_scale = _inputs(num_tokens, num_groups, lora_rank, head_dim, seed=seed)
    cos, sin = np.split(cache[positions], 2, axis=-1)
    nope = 128 - cache.shape[-1]
    ones, zeros = np.ones((num_tokens, nope), np.float32), np.zeros((num_tokens, nope), np.float32)
    cos_sin = np.concatenate([ones, np.repeat(cos, 2, -1), zeros, -np.repeat(sin, 2, -1)], axis=-1)
    return x, wo_a, wo_a_scale, cos_sin.astype(np.float32), positions, cache


_TOL_WHY = ("bf16 activations and output, fp8 weights: products are exact and summed in f32 on both sides, but "
            "the kernel scales by the f32 wo_a_scale and the reference by it rounded to bf16 (2^-8 relative), "
            "then both round to bf16 (2^-8); upstream's tolerance is 1e-2")

CASES = [
    Case(
        id="grouped_lowrank_proj/fused-t32g2r256d256-tile16x128-sub8",
        call=lambda get: _fused(get, inverse=True, tile_t=16, tile_r=128, sub_t=8, quantize_activations=False),
        inputs=lambda: _inputs(32, 2, 256, 256, seed=1),
        reference=lambda get: functools.partial(get(REFERENCE).grouped_lowrank_proj, inverse=True,
                                                quantize_activations=False),
        tolerance=(1e-2, 1e-2),
        tolerance_why=_TOL_WHY,
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="grouped_lowrank_proj/fused-quant-t16g1r128d384-forward",
        call=lambda get: _fused(get, inverse=False, quantize_activations=True),
        inputs=lambda: _inputs(16, 1, 128, 384, rotary_dim=32, seed=2),
        reference=lambda get: functools.partial(get(REFERENCE).grouped_lowrank_proj, inverse=False,
                                                quantize_activations=True),
        tolerance=(2e-2, 2e-2),
        tolerance_why="the reference quantizes the activations to fp8 exactly as the kernel does (bf16 448/amax "
                      "scale, both computed by XLA on CPU here), so only the f32 vs bf16 wo_a_scale and the bf16 "
                      "output rounding remain (~2^-8); 2e-2 leaves room for a rare one-ulp fp8 rounding flip",
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="grouped_lowrank_proj/wo_a_projection-t16g2r128d256",
        call=lambda get: lambda x, wo_a, wo_a_scale, cos_sin, positions, cache: get(KERNEL).wo_a_projection(
            x, wo_a, wo_a_scale, cos_sin, tile_t=8, quantize_activations=False),
        inputs=lambda: _wo_a_inputs(16, 2, 128, 256, seed=3),
        reference=lambda get: lambda x, wo_a, wo_a_scale, cos_sin, positions, cache: get(
            REFERENCE).grouped_lowrank_proj(x, positions, cache, wo_a, wo_a_scale, inverse=True,
                                            quantize_activations=False),
        tolerance=(1e-2, 1e-2),
        tolerance_why=_TOL_WHY,
        chips=CHIPS,
        interpret_chip="v7x",
    ),
]
