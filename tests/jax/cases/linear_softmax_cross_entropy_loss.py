"""Linear softmax cross-entropy loss: the forward (loss, lse) and backward (dx, dw) Pallas kernels.

Upstream's Op runs on TPU v5e and newer (`generation >= 5`) and the kernels only check block sizes against the
chip's lane count, so every chip. The reference is a float64 numpy computation written here (logits = x @ w,
log-softmax, picked label), independent of upstream's `reference.py`.
"""

from __future__ import annotations

import functools

import numpy as np

from . import Case, on_tensorcores, rng

KERNEL = "_src.ops.linear_softmax_cross_entropy_loss.pallas_mosaic_tpu_kernel"
CHIPS = ("v5e", "v6e", "v7x")
B, H, V = 256, 256, 512  # two blocks along each dimension with the block sizes below
BLOCKS = {"b_block_size": 128, "h_block_size": 128, "v_block_size": 256}
F32_TOL = (1e-5, 1e-5)
F32_WHY = ("f32 operands with the kernel's f32 matmuls (Mosaic's default precision; exact in interpret mode on CPU) "
           "against float64: online-softmax and tiled summation order only, O(1) values")


def _inputs(dtype: type = np.float32) -> tuple[np.ndarray, ...]:
    r = rng(B + H + V)
    x = (r.standard_normal((B, H), np.float32) / np.sqrt(H)).astype(dtype)
    w = r.standard_normal((H, V), np.float32).astype(dtype)
    labels = r.integers(0, V, size=B).astype(np.int32)
    return x, labels, w


def _bwd_inputs() -> tuple[np.ndarray, ...]:
    x, labels, w = _inputs()
    logits = x.astype(np.float64) @ w.astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return np.float32(1.5), lse.astype(np.float32), x, labels, w


def _forward64(x, labels, w, reduction: str):  # noqa: ANN001, ANN202
    logits = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    m = logits.max(-1)
    lse = np.log(np.exp(logits - m[:, None]).sum(-1)) + m
    per = lse - logits[np.arange(logits.shape[0]), np.asarray(labels)]
    loss = {"sum": per.sum(), "mean": per.mean(), "none": per}[reduction]
    return np.asarray(loss, np.float32), lse.astype(np.float32)


def _backward64(dout, lse, x, labels, w, reduction: str):  # noqa: ANN001, ANN202
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    s = np.exp(x64 @ w64 - np.asarray(lse, np.float64)[:, None])
    s[np.arange(s.shape[0]), np.asarray(labels)] -= 1.0
    s *= float(dout) / (s.shape[0] if reduction == "mean" else 1)
    return (s @ w64.T).astype(np.float32), (x64.T @ s).astype(np.float32)


def _fwd_case(reduction: str) -> Case:
    return Case(
        id=f"linear_softmax_cross_entropy_loss/fwd-{reduction}-B{B}-H{H}-V{V}",
        call=lambda get: on_tensorcores(functools.partial(
            get(KERNEL).linear_softmax_cross_entropy_loss_fwd_pallas_mosaic_tpu, reduction=reduction, **BLOCKS)),
        inputs=_inputs,
        reference=lambda get: functools.partial(_forward64, reduction=reduction),
        tolerance=(1e-5, 1e-4),
        tolerance_why=F32_WHY + "; atol 1e-4 for the summed loss of 256 terms of ~6",
        chips=CHIPS,
    )


CASES = [
    _fwd_case("sum"),
    _fwd_case("none"),
    Case(
        id=f"linear_softmax_cross_entropy_loss/bwd-mean-B{B}-H{H}-V{V}",
        call=lambda get: on_tensorcores(functools.partial(
            get(KERNEL).linear_softmax_cross_entropy_loss_bwd_pallas_mosaic_tpu, reduction="mean", **BLOCKS)),
        inputs=_bwd_inputs,
        reference=lambda get: functools.partial(_backward64, reduction="mean"),
        tolerance=F32_TOL,
        tolerance_why=F32_WHY + "; gradients of size ~1e-3 scaled by 1.5 / B",
        chips=CHIPS,
    ),
]
