"""Fused FP8 matmul (experimental): forward and dLHS kernels, lowering and interpret-mode numerics.

Only chips whose MXU takes float8_e4m3fn operands run these kernels (`fp8_matmul_supported_on`;
upstream's tests skip everywhere else), i.e. only v7x of "v5e", "v6e", "v7x".
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, on_tensorcores, rng

FWD = "_src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu_kernel"
DLHS = "_src.ops.experimental.fused_fp8_matmul.pallas_mosaic_tpu_dlhs_kernel"
REF = "_src.ops.experimental.fused_fp8_matmul.base"  # upstream keeps its references beside the Op base
FP8 = jnp.float8_e4m3fn
FP8_MAX = 448.0
CHIPS = ("v7x",)  # the only chip with an FP8 MXU; see the module docstring

# Kernel and reference quantize with the same absmax-per-row algorithm (the FP8 values come out
# identical), and FP8 x FP8 products are exact in f32. What differs: the f32 row scale
# `max_abs / 448` is computed in bf16, which XLA may keep at f32 precision in one program and not
# the other (up to 2^-8 relative), the f32 summation order (~1e-6), and the final rounding to bf16
# (2^-8 relative). Outputs have std ~0.3-0.5; with several k blocks, partial sums of magnitude ~1
# carry the scale difference into near-zero results, hence atol 1e-2 (a wrong tile or scale is off
# by ~0.3). A wrong scale or tile index shows up as tens of percent.
_RTOL, _ATOL = 1e-2, 1e-2
_WHY = ("same FP8 quantization on both sides and exact FP8 products; differences are the bf16 rounding of "
        "the row scale (2^-8 rel), f32 summation order and the final bf16 rounding (2^-8 rel); atol covers "
        "cancellation of ~1-magnitude partial sums")


def _compare_with_residuals(out, expected) -> None:  # noqa: ANN001
    """`out` to tolerance, the FP8 residual exactly, its f32 row scale to the bf16 rounding of `max_abs / 448`."""
    (o, xq, sx), (eo, exq, esx) = out, expected
    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(eo, np.float32), rtol=_RTOL, atol=_ATOL)
    np.testing.assert_array_equal(np.asarray(xq, np.float32), np.asarray(exq, np.float32))
    np.testing.assert_allclose(np.asarray(sx), np.asarray(esx), rtol=2.0**-7, atol=0)


def _weights(r: np.random.Generator, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A `(k, n)` FP8 weight with one f32 scale per column, as the forward pass receives it."""
    w = r.standard_normal((k, n), np.float32) * 0.02
    sw = (np.abs(w).max(axis=0) / FP8_MAX).astype(np.float32)
    return (w / sw).astype(FP8), sw


def _fwd_inputs(m: int, k: int, n: int) -> tuple[np.ndarray, ...]:
    r = rng(m + 3 * k + 7 * n)
    x = r.standard_normal((m, k), np.float32).astype(jnp.bfloat16)
    return (x, *_weights(r, k, n))


def _dlhs_inputs(m: int, k: int, n: int) -> tuple[np.ndarray, ...]:
    r = rng(m + 5 * k + 11 * n)
    w, sw = _weights(r, k, n)
    return r.standard_normal((m, n), np.float32).astype(jnp.bfloat16), w, sw


def _fwd_reference_with_residuals(get):  # noqa: ANN001, ANN202
    ref = get(REF)

    def f(x, w, sw):  # noqa: ANN001, ANN202
        out, (xq, sx, _, _) = ref.fused_fp8_matmul_reference(x, ref.QArray(qvalue=w, scale=sw[None, :]))
        return out, xq, sx

    return f


def _fwd_reference_per_k_block(get, bk: int):  # noqa: ANN001, ANN202
    """With several k blocks the kernel quantizes each `(row, k block)` on its own and sums in f32."""
    ref = get(REF)

    def f(x, w, sw):  # noqa: ANN001, ANN202
        acc = 0.0
        for c in range(0, x.shape[1], bk):
            xq, sx = ref.quantize_rows_fp8(x[:, c:c + bk])
            acc = acc + jnp.matmul(xq, w[c:c + bk], preferred_element_type=jnp.float32) * (sx * sw)
        return acc.astype(x.dtype)

    return f


CASES = [
    Case(
        id="fused_fp8_matmul/fwd-bf16-256x256x256-single_k-return_xq",
        call=lambda get: on_tensorcores(functools.partial(get(FWD).fused_fp8_matmul_pallas, bm=128, bk=256, bn=256,
                                           return_xq=True)),
        inputs=lambda: _fwd_inputs(256, 256, 256),
        reference=_fwd_reference_with_residuals,
        tolerance=(_RTOL, _ATOL),
        tolerance_why=_WHY + "; the FP8 residual must match exactly, its row scale to 2^-7 (see compare)",
        compare=_compare_with_residuals,
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="fused_fp8_matmul/fwd-bf16-256x512x256-multi_k-n_grid",
        call=lambda get: on_tensorcores(functools.partial(get(FWD).fused_fp8_matmul_pallas, bm=128, bk=256, bn=128)),
        inputs=lambda: _fwd_inputs(256, 512, 256),
        reference=lambda get: _fwd_reference_per_k_block(get, 256),
        tolerance=(_RTOL, _ATOL),
        tolerance_why=_WHY + "; the reference quantizes per k block like the kernel's accumulator path",
        chips=CHIPS,
        interpret_chip="v7x",
    ),
    Case(
        id="fused_fp8_matmul/dlhs-bf16-256x512x256-multi_k-cache",
        call=lambda get: on_tensorcores(functools.partial(get(DLHS).fused_fp8_dlhs_pallas, bm=128, bk=256, bn=256)),
        inputs=lambda: _dlhs_inputs(256, 512, 256),
        reference=lambda get: get(REF).fused_fp8_dlhs_reference,
        tolerance=(_RTOL, _ATOL),
        tolerance_why=_WHY + "; bn == n, so each cotangent row has one scale, as in the reference",
        chips=CHIPS,
        interpret_chip="v7x",
    ),
]
