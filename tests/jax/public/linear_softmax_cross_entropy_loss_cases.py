"""Public linear softmax cross-entropy calls (`ops.linear_softmax_cross_entropy_loss`, Mosaic) on every chip,
forward and through `jax.grad` (upstream's VJP Op runs the backward kernel). The tables (forward and VJP) are
registered in tpu_ops_cases.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .cases import CALL_CHIPS, PublicCase, Table

TABLES: list[Table] = []  # both tables are registered in tpu_ops_cases.py


def _specs(b: int, h: int, v: int, dtype: str) -> tuple:
    return (((b, h), dtype), ((b,), "int32"), ((h, v), dtype))


def _forward(reduction: str) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda x, labels, w: api.ops.linear_softmax_cross_entropy_loss(
        x, labels, w, reduction=reduction, implementation="mosaic_tpu"))


def _grad(reduction: str) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        def loss(x: Any, w: Any, labels: Any) -> Any:
            out = api.ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction=reduction,
                                                            implementation="mosaic_tpu")
            return jnp.sum(out)

        return lambda x, labels, w: jax.grad(loss, argnums=(0, 1))(x, w, labels)

    return build


def cases() -> list[PublicCase]:
    calls = [
        ("fwd-sum-bf16-512x256x1024", _specs(512, 256, 1024, "bfloat16"), _forward("sum")),
        ("fwd-none-f32-256x128x512", _specs(256, 128, 512, "float32"), _forward("none")),
        ("grad-mean-bf16-512x256x1024", _specs(512, 256, 1024, "bfloat16"), _grad("mean")),
    ]
    return [PublicCase(f"linear_softmax_cross_entropy_loss/mosaic/{name}", chip, specs, build)
            for chip in CALL_CHIPS for name, specs, build in calls]
