"""Interpret-mode numerics of the public DeepSeek-V4 RoPE (`ops.deepseek_rope`), its three modes, on CPU
as TPU7x (the only chip upstream runs it on).

The reference is upstream's pure-JAX `deepseek_rope/reference.py`, reached through the kernel; the
public call must run the Pallas kernel (checked in its jaxpr), not the XLA Op.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

EPS = 1e-6


def _inputs(shape: tuple[int, ...], dtype, seed: int, rotary_dim: int = 64, max_position: int = 64):  # noqa: ANN001, ANN202
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape, np.float32).astype(dtype)
    positions = r.integers(0, max_position, size=(shape[0],)).astype(np.int32)
    freqs = r.uniform(0.0, 2.0 * np.pi, (max_position, rotary_dim // 2)).astype(np.float32)
    return x, positions, np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32)


def _public(kernel, args: tuple, **kw):  # noqa: ANN001, ANN202
    def fn(*a):  # noqa: ANN002, ANN202
        return kernel.ops.deepseek_rope(*a, implementation="mosaic_tpu", **kw)

    assert "pallas_call" in str(jax.make_jaxpr(fn)(*args)), "the public call did not run the kernel"
    return jax.jit(fn)(*args)


@pytest.mark.parametrize("mode", ["rope", "qnorm_rope"])
def test_rotation(kernel, emulation, mode):
    x, positions, cache = _inputs((16, 4, 256), jnp.bfloat16 if mode == "rope" else np.float32, seed=1)
    reference = importlib.import_module(f"{kernel.__name__}._ported._src.ops.deepseek_rope.reference")
    with emulation.interpret_on_cpu("v7x"), kernel.ops.config.cross_compile(True):
        got = _public(kernel, (x, positions, cache), mode=mode, inverse=True, eps=EPS)
    if mode == "rope":
        want = reference.rope(x, positions, cache, inverse=True)
        # bf16 in and out, the rotation in f32 on both sides: at most one bf16 rounding step apart.
        tol = dict(rtol=1e-2, atol=1e-2)
    else:
        want = reference.qnorm_rope(x, positions, cache, EPS, inverse=True)
        # f32 throughout; the RMS over 256 channels is reduced in a different order: ~1e-7 relative.
        tol = dict(rtol=1e-5, atol=1e-5)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), **tol)


def test_rope_quant(kernel, emulation):
    x, positions, cache = _inputs((16, 8, 128), jnp.bfloat16, seed=3)
    reference = importlib.import_module(f"{kernel.__name__}._ported._src.ops.deepseek_rope.reference")
    with emulation.interpret_on_cpu("v7x"), kernel.ops.config.cross_compile(True):
        q, scales = _public(kernel, (x, positions, cache), mode="rope_quant", quant_dtype=jnp.float8_e4m3fn)
    q_ref, scales_ref = reference.rope_quant(x, positions, cache, quant_dtype=jnp.float8_e4m3fn)
    # Scales: one f32 max and divide on both sides (f32 rounding). The fp8 codes come from the same f32
    # products cast the same way, so they match bit for bit, as upstream's kernel test asserts.
    np.testing.assert_allclose(np.asarray(scales), np.asarray(scales_ref), rtol=1e-6, atol=1e-6)
    assert q.dtype == q_ref.dtype
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), np.asarray(q_ref).view(np.uint8))
