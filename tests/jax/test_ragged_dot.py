"""Ragged dot v1 with quantized operands, in interpret mode, against `jax.lax.ragged_dot`.

The plain bf16/f32, transpose_rhs, tgmm and empty/unaligned group cases are in cases/ragged_dot.py.
Here: int8 rhs given as a qwix `QArray` and as `AsQArray` (quantized before the kernel), and
in-kernel quantization (`rhs_qdtype`), each against the exact product of what was quantized.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.cases import rng

KERNEL = "_src.ops.ragged_dot.pallas_mosaic_tpu_kernel"
M, K, N = 256, 256, 256
SIZES = np.array([100, 0, 56, 100], np.int32)  # an empty group, sizes off the 128 tile


@pytest.fixture(scope="module")
def operands():
    r = rng(42)
    lhs = jnp.asarray(r.standard_normal((M, K), np.float32), jnp.bfloat16)
    rhs = jnp.asarray(r.standard_normal((len(SIZES), K, N), np.float32), jnp.bfloat16)
    return lhs, rhs, jnp.asarray(SIZES)


def _gmm(kernel_module, lhs, rhs, sizes, emulation, **kw):  # noqa: ANN001, ANN202
    fn = functools.partial(kernel_module.gmm, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.float32, **kw)
    with emulation.interpret_on_cpu("v6e"):
        return jax.jit(fn)(lhs, rhs, sizes)


def _exact(lhs, rhs, sizes):  # noqa: ANN001, ANN202
    return jax.lax.ragged_dot(lhs.astype(jnp.float32), rhs.astype(jnp.float32), sizes,
                              precision=jax.lax.Precision.HIGHEST)


@pytest.mark.parametrize("tiling", [{0: 1, 1: K, 2: 1}, {0: 1, 1: 128, 2: 1}], ids=["channelwise", "k-tiles-128"])
@pytest.mark.parametrize("form", ["QArray", "AsQArray"])
def test_int8_rhs_matches_the_dequantized_product(operands, get, emulation, form, tiling):
    lhs, rhs, sizes = operands
    kernel, ragged = get(KERNEL), get("ragged_dot")
    q = ragged.quantize(rhs, jnp.int8, tiled_axes=tiling)
    assert q.qvalue.dtype == jnp.int8
    operand = q if form == "QArray" else ragged.AsQArray(rhs, jnp.int8, tiled_axes=tiling)
    out = _gmm(kernel, lhs, operand, sizes, emulation)
    dequantized = ragged.dequantize(q)
    expected = np.asarray(_exact(lhs, dequantized, sizes))
    # The kernel may round the dequantized rhs (and products) to bf16: each term moves by at most
    # 2^-8 of |lhs*rhs|, so each output by at most 2^-8 of sum_k |lhs||rhs| (f32 accumulation).
    bound = np.asarray(_exact(jnp.abs(lhs), jnp.abs(dequantized), sizes)) * 2.0**-8 + 1e-5
    err = np.abs(np.asarray(out) - expected)
    assert (err <= bound).all(), f"worst excess {np.max(err - bound):.3g} over the bf16 rounding bound"


def test_in_kernel_int8_quantization_stays_within_its_error_bound(operands, get, emulation):
    lhs, rhs, sizes = operands
    out = np.asarray(_gmm(get(KERNEL), lhs, rhs, sizes, emulation, rhs_qdtype=jnp.int8))
    exact = np.asarray(_exact(lhs, rhs, sizes))
    # Absmax int8 quantization moves each rhs element by at most half a step, max|row|/127/2,
    # (the kernel takes the max over a tile's row, which is at most the whole row's). Summed
    # over k that bounds each output; 2% slack covers the bf16 scales and f32 summation order.
    group = np.repeat(np.arange(len(SIZES)), SIZES)
    step = np.abs(np.asarray(rhs, np.float32)).max(axis=2) / 127.0  # [g, k]
    bound = np.abs(np.asarray(lhs, np.float32)) @ (step / 2).T  # [m, g]
    bound = bound[np.arange(M), group][:, None] * 1.02 + 1e-3
    err = np.abs(out - exact)
    assert (err <= bound).all(), f"worst excess {np.max(err - bound):.3g}"
    assert err.max() > 0, "no quantization error at all: rhs_qdtype was not applied"
