"""DeepSeek-V4 RoPE (`rope`, `qnorm_rope`, `rope_quant`): cases against the upstream reference."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.deepseek_rope.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.deepseek_rope.reference"

# Upstream only supports and tests these kernels on TPU7x (`supported_on`: generation >= 7; the
# kernel tests skip below 7), so v7x is the only chip lowered and emulated.
CHIPS = ("v7x",)


def _inputs(shape: tuple[int, ...], dtype, *, rotary_dim: int = 64, max_position: int = 64,  # noqa: ANN001
            seed: int = 0) -> tuple[np.ndarray, ...]:
    """`(x, positions, cos_sin_cache)` laid out as DeepSeek-V4 builds them: `[cos | sin]` rows."""
    r = rng(seed)
    x = r.standard_normal(shape, np.float32).astype(dtype)
    positions = r.integers(0, max_position, size=(shape[0],)).astype(np.int32)
    freqs = r.uniform(0.0, 2.0 * np.pi, (max_position, rotary_dim // 2)).astype(np.float32)
    cos_sin_cache = np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32)
    return x, positions, cos_sin_cache


def _compare_quant(out, expected) -> None:  # noqa: ANN001
    """Scales to f32 rounding; fp8 codes bit for bit (as upstream's kernel test does)."""
    (q, scales), (q_ref, scales_ref) = out, expected
    np.testing.assert_allclose(np.asarray(scales), np.asarray(scales_ref), rtol=1e-6, atol=1e-6)
    assert q.dtype == q_ref.dtype, (q.dtype, q_ref.dtype)
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), np.asarray(q_ref).view(np.uint8))


CASES = [
    Case(
        id="deepseek_rope/rope-bf16-t16h4d256-r64-inverse",
        call=lambda get: functools.partial(get(KERNEL).rope, inverse=True, tile_n=8),
        inputs=lambda: _inputs((16, 4, 256), jnp.bfloat16, seed=1),
        reference=lambda get: functools.partial(get(REFERENCE).rope, inverse=True),
        tolerance=(1e-2, 1e-2),
        tolerance_why="bf16 in and out, rotation in f32 on both sides: at most one bf16 rounding step apart "
                      "(upstream's kernel test uses 1e-2 for bf16)",
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="deepseek_rope/qnorm_rope-f32-t8h4d256-r64",
        call=lambda get: functools.partial(get(KERNEL).qnorm_rope, eps=1e-6, tile_n=4),
        inputs=lambda: _inputs((8, 4, 256), np.float32, seed=2),
        reference=lambda get: functools.partial(get(REFERENCE).qnorm_rope, eps=1e-6),
        tolerance=(1e-5, 1e-5),
        tolerance_why="f32 throughout; kernel and reference reduce the RMS in different orders "
                      "(upstream's kernel test uses 1e-5 for f32)",
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="deepseek_rope/rope_quant-bf16-t16h8d128-r64-e4m3",
        call=lambda get: functools.partial(get(KERNEL).rope_quant, quant_dtype=jnp.float8_e4m3fn, tile_n=8),
        inputs=lambda: _inputs((16, 8, 128), jnp.bfloat16, seed=3),
        reference=lambda get: functools.partial(get(REFERENCE).rope_quant, quant_dtype=jnp.float8_e4m3fn),
        tolerance_why="scales are one f32 max and divide on both sides (1e-6); the fp8 codes come from the "
                      "same f32 products cast the same way, so they must match bit for bit, as upstream asserts",
        compare=_compare_quant,
        chips=CHIPS,
        interpret_chip="v7x",
    ),
]
