"""Public Kimi delta attention calls (`ops.kimi_delta_attention(implementation="mosaic")`) on v6e and v7x (upstream's
Op supports generation >= 6), forward and through `jax.grad` (upstream's VJP Op runs the backward kernels): plain
log-space gates, the fused gate activation with a lower bound and L2-normalised q/k, and a length upstream's
Mosaic kernel refuses (not a whole number of 64-token chunks: both sides must raise the same error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .cases import CALL_CHIPS, PublicCase, Table

TABLES: list[Table] = []  # upstream ships no KDA table
CHIPS = tuple(chip for chip in CALL_CHIPS if chip != "v5e")


def _specs(h: int, b: int, t: int, d: int, dtype: str, gate_params: bool = False) -> tuple:
    specs = (((h, b, t, d), dtype),) * 4 + (((h, b, t), dtype),)
    return specs + ((((h,), "float32"), ((h * d,), "float32")) if gate_params else ())


def _call(api: Any, args: tuple, kw: dict) -> Any:
    q, k, v, g, beta, *gate = args
    if gate:
        kw = {**kw, "a_log": gate[0], "delta_time_bias": gate[1]}
    return api.ops.kimi_delta_attention(q, k, v, g, beta, implementation="mosaic", **kw)


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: _call(api, args, kw))


def _grad(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        def loss(*args: Any) -> Any:
            out, _ = _call(api, args, kw)
            return jnp.sum(jnp.square(out.astype(jnp.float32)))

        return lambda *args: jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)

    return build


def cases() -> list[PublicCase]:
    calls = [
        ("fwd-bf16-h2b2t128k128-final_state", _specs(2, 2, 128, 128, "bfloat16"),
         _forward(output_final_state=True, use_qk_l2norm=True)),
        ("grad-f32-h2b1t128k128", _specs(2, 1, 128, 128, "float32"), _grad()),
        ("grad-bf16-h2b1t128k128-gate_in_kernel", _specs(2, 1, 128, 128, "bfloat16", gate_params=True),
         _grad(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm=True)),
        ("refused-t100", _specs(2, 1, 100, 128, "bfloat16"), _forward()),
    ]
    return [PublicCase(f"kda/mosaic/{name}", chip, specs, build) for chip in CHIPS for name, specs, build in calls]
