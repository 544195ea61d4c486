"""Public fused FP8 matmul calls (the experimental Op class `ops.experimental.tpu.FusedFp8Matmul`)
on TPU7x, the only chip with an FP8 MXU (`fp8_matmul_supported_on`); forward and through
`jax.grad` (upstream's VJP Op: the dLHS kernel, dRHS in XLA). A plain weight the Op quantizes per
column, and a pre-quantized `QArray` weight; and an fp8 weight passed without its scale, which
upstream's Op refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .cases import PublicCase

TABLES: list = []  # no fused fp8 matmul table ships
BASE = "_src.ops.experimental.fused_fp8_matmul.base"


def _call(api: Any, lhs: Any, rhs: Any, scale: Any | None) -> Any:
    if scale is not None:  # a QArray: fp8 values with one f32 scale per output column
        rhs = api.module(BASE).QArray(qvalue=rhs, scale=scale[None, :])
    return api.ops.experimental.tpu.FusedFp8Matmul()(lhs, rhs)


def _forward(quantized: bool) -> Callable[[Any], Callable[..., Any]]:
    if quantized:
        return lambda api: (lambda lhs, rhs, scale: _call(api, lhs, rhs, scale))
    return lambda api: (lambda lhs, rhs: _call(api, lhs, rhs, None))


def _grad(quantized: bool) -> Callable[[Any], Callable[..., Any]]:
    """Gradients of a loss that uses the output's values; for a QArray weight, of the lhs only."""
    def build(api: Any) -> Callable[..., Any]:
        def loss(lhs: Any, rhs: Any, *scale: Any) -> Any:
            out = _call(api, lhs, rhs, scale[0] if scale else None)
            return jnp.sum(jnp.square(out.astype(jnp.float32)))
        return jax.grad(loss, argnums=0 if quantized else (0, 1))
    return build


def _specs(m: int, k: int, n: int, quantized: bool, dtype: str = "bfloat16") -> tuple:
    if quantized:
        return (((m, k), dtype), ((k, n), "float8_e4m3fn"), ((n,), "float32"))
    return (((m, k), dtype), ((k, n), dtype))


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for name, specs, quantized in [
        ("bf16-256x512x256", _specs(256, 512, 256, False), False),
        ("f32-lhs-512x256x512", _specs(512, 256, 512, False, "float32"), False),
        ("qarray-256x512x512", _specs(256, 512, 512, True), True),
    ]:
        out.append(PublicCase(f"fused_fp8_matmul/{name}/fwd", "v7x", specs, _forward(quantized)))
        out.append(PublicCase(f"fused_fp8_matmul/{name}/grad", "v7x", specs, _grad(quantized)))
    # An fp8 weight without its scale must come as a QArray.
    out.append(PublicCase("fused_fp8_matmul/fp8-rhs-without-scale-refused/fwd", "v7x",
                          (((256, 256), "bfloat16"), ((256, 256), "float8_e4m3fn")), _forward(False)))
    return out
