"""Ragged dot v1 (`gmm`, `tgmm`): bf16 and f32, transpose_rhs, empty groups and group sizes off the tile;
int8 rhs as a qwix `QArray`, as `AsQArray` and quantized in the kernel (`rhs_qdtype`).

The quantized cases are lowered and compared with upstream here; their numerics, against the
exact product of what was quantized, are in tests/jax/test_ragged_dot.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.ragged_dot.pallas_mosaic_tpu_kernel"
HIGHEST = jax.lax.Precision.HIGHEST


def _gmm_inputs(m: int, k: int, n: int, sizes: list[int], dtype, *, transpose_rhs: bool = False):  # noqa: ANN001, ANN202
    r = rng(m + k + n)
    lhs = r.standard_normal((m, k), np.float32).astype(dtype)
    rhs_shape = (len(sizes), n, k) if transpose_rhs else (len(sizes), k, n)
    rhs = r.standard_normal(rhs_shape, np.float32).astype(dtype)
    return lhs, rhs, np.array(sizes, np.int32)


def _gmm(get, dtype, precision=jax.lax.Precision.DEFAULT, **kw):  # noqa: ANN001, ANN202
    return functools.partial(get(KERNEL).gmm, precision=precision, out_dtype=dtype, **kw)


def _ragged_dot(transpose_rhs: bool = False):  # noqa: ANN202
    def reference(get):  # noqa: ANN001, ANN202
        def fn(lhs, rhs, sizes):  # noqa: ANN001, ANN202
            rhs = jnp.swapaxes(rhs, 1, 2) if transpose_rhs else rhs
            return jax.lax.ragged_dot(lhs.astype(jnp.float32), rhs.astype(jnp.float32), sizes, precision=HIGHEST)
        return fn
    return reference


def _tgmm_inputs() -> tuple[np.ndarray, ...]:
    r = rng(5)
    return (r.standard_normal((128, 256), np.float32), r.standard_normal((256, 128), np.float32),
            np.array([128, 0, 37, 91], np.int32))


def _per_group_products(get):  # noqa: ANN001, ANN202
    """out[g] = lhs[:, rows of g] @ rhs[rows of g], written with a one-hot group matrix."""
    def fn(lhs, rhs, sizes):  # noqa: ANN001, ANN202
        group_of_row = jnp.repeat(jnp.arange(sizes.shape[0]), sizes, total_repeat_length=lhs.shape[1])
        in_group = jnp.arange(sizes.shape[0])[:, None] == group_of_row[None, :]  # [g, m]
        return jnp.einsum("km,gm,mn->gkn", lhs, in_group.astype(lhs.dtype), rhs, precision=HIGHEST)
    return fn


def _quantized_gmm(form: str):  # noqa: ANN202
    """gmm with rhs quantized to int8 per channel (k reduced): before the kernel, or inside it."""
    def call(get):  # noqa: ANN001, ANN202
        quantization = get("_src.quantization")

        def fn(lhs, rhs, sizes):  # noqa: ANN001, ANN202
            if form == "in-kernel":
                return _gmm(get, jnp.float32, rhs_qdtype=jnp.int8)(lhs, rhs, sizes)
            rhs = quantization.AsQArray(rhs, jnp.int8, tiled_axes={0: 1, 1: rhs.shape[1], 2: 1})
            return _gmm(get, jnp.float32)(lhs, rhs.as_qarray() if form == "QArray" else rhs, sizes)
        return fn
    return call


BF16_WHY = ("bf16 inputs, f32 accumulation over k=128, f32 output: the reference sums the same bf16 values "
            "in f32, so only summation order differs (errors ~1e-5 of |out| ~ 11)")
F32_WHY = "f32 throughout (HIGHEST precision, so on a TPU too); only summation order differs"

CASES = [
    Case(
        id="ragged_dot/gmm-bf16-256x128x256-g4",
        call=lambda get: _gmm(get, jnp.float32),
        inputs=lambda: _gmm_inputs(256, 128, 256, [64, 0, 100, 92], jnp.bfloat16),
        reference=_ragged_dot(),
        tolerance=(1e-4, 1e-4),
        tolerance_why=BF16_WHY,
        chips=("v5e", "v6e", "v7x"),
    ),
    Case(
        id="ragged_dot/gmm-bf16-out-bf16-256x128x256-g4",
        call=lambda get: _gmm(get, jnp.bfloat16),
        inputs=lambda: _gmm_inputs(256, 128, 256, [0, 200, 0, 56], jnp.bfloat16),
        reference=_ragged_dot(),
        tolerance=(8e-3, 1e-2),
        tolerance_why="as above, then the output is rounded to bf16 (relative step 2^-8)",
        chips=("v5e", "v6e", "v7x"),
    ),
    Case(
        id="ragged_dot/gmm-f32-transpose_rhs-256x256x128-g3",
        call=lambda get: _gmm(get, jnp.float32, HIGHEST, transpose_rhs=True),  # f32 passes on a TPU too
        inputs=lambda: _gmm_inputs(256, 256, 128, [17, 200, 39], np.float32, transpose_rhs=True),
        reference=_ragged_dot(transpose_rhs=True),
        tolerance=(1e-5, 1e-4),
        tolerance_why=F32_WHY,
        chips=("v5e", "v6e", "v7x"),
    ),
    Case(
        id="ragged_dot/tgmm-f32-128x256x128-g4",
        call=lambda get: functools.partial(get(KERNEL).tgmm, precision=HIGHEST, out_dtype=jnp.float32),
        inputs=_tgmm_inputs,
        reference=_per_group_products,
        tolerance=(1e-5, 1e-4),
        tolerance_why=F32_WHY,
        chips=("v5e", "v6e", "v7x"),
    ),
    *[Case(
        id=f"ragged_dot/gmm-int8-rhs-{form}-256x256x256-g4",
        call=_quantized_gmm(form),
        inputs=lambda: _gmm_inputs(256, 256, 256, [64, 0, 100, 92], jnp.bfloat16),
        chips=("v5e", "v6e", "v7x"),
        numerics_in="tests/jax/test_ragged_dot.py (bounds for quantized operands)",
    ) for form in ("QArray", "AsQArray", "in-kernel")],
]
