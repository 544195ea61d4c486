"""Interpret-mode numerics of the public reverse-RoPE `wo_a` projection (`ops.grouped_lowrank_proj`), on CPU
as TPU7x (the only chip upstream runs it on), with upstream's heuristic tiles.

The reference is upstream's pure-JAX `grouped_lowrank_proj/reference.py`, reached through the kernel; the
public call must run the Pallas kernels (checked in its jaxpr), not the XLA Op.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

HEADS_PER_GROUP = 8


def _inputs(tokens: int, groups: int, rank: int, head_dim: int, rotary_dim: int, seed: int) -> tuple:
    r = np.random.default_rng(seed)
    x = r.standard_normal((tokens, groups * HEADS_PER_GROUP, head_dim), np.float32).astype(jnp.bfloat16)
    positions = r.integers(0, 64, size=(tokens,)).astype(np.int32)
    freqs = r.uniform(0.0, 2.0 * np.pi, (64, rotary_dim // 2)).astype(np.float32)
    cache = np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32)
    wo_a = r.standard_normal((HEADS_PER_GROUP * head_dim, groups * rank), np.float32).astype(jnp.float8_e4m3fn)
    return x, positions, cache, wo_a, r.uniform(0.5, 1.5, size=groups * rank).astype(np.float32)


# bf16 activations and output, fp8 weights: products are exact and summed in f32 on both sides, but the
# kernel scales by the f32 wo_a_scale and the reference by it rounded to bf16 (2^-8 relative), then both
# round to bf16 (2^-8). With fp8 activations both quantize alike (bf16 448/amax scale); 2e-2 leaves room
# for a rare one-ulp fp8 rounding flip. Upstream's tolerance is 1e-2.
@pytest.mark.parametrize(("shape", "inverse", "quantize", "tol"), [
    ((32, 2, 256, 256, 64), True, False, 1e-2),
    ((16, 1, 128, 384, 32), False, True, 2e-2),
], ids=["inverse", "forward-quantized"])
def test_projection(kernel, emulation, shape, inverse, quantize, tol):
    args = _inputs(*shape, seed=sum(shape))

    def fn(*a):  # noqa: ANN002, ANN202
        return kernel.ops.grouped_lowrank_proj(*a, inverse=inverse, quantize_activations=quantize,
                                               implementation="mosaic_tpu")

    with emulation.interpret_on_cpu("v7x"), kernel.ops.config.cross_compile(True):
        assert "pallas_call" in str(jax.make_jaxpr(fn)(*args)), "the public call did not run the kernel"
        got = jax.jit(fn)(*args)
    reference = importlib.import_module(f"{kernel.__name__}._ported._src.ops.grouped_lowrank_proj.reference")
    want = reference.grouped_lowrank_proj(*args, inverse=inverse, quantize_activations=quantize)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol)
