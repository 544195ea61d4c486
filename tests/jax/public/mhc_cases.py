"""Public mHC calls (`ops.mhc_pre`, `ops.mhc_post`, `ops.mhc_fused_post_pre`, DeepSeek-V4 hyper-
connections) on v5e, v6e and TPU7x (upstream's Ops: generation 5 and newer); no VJP. Upstream's
flat layout: residual streams `(T, M * H)`, post gates `(T, M)`. And no Sinkhorn iteration, which
upstream's Op refuses.

The eps arguments are DeepSeek-V4's 1e-6; the profiling payload records them, so the identity check
also covers how small floats are written there (as pydantic writes them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import CALL_CHIPS, PublicCase

TABLES: list = []  # the mhc tables are registered in tpu_ops_cases.py
GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)  # rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat


def _gate_specs(m: int, h: int) -> tuple:
    return (((m * (m + 2), m * h), "float32"), ((3,), "float32"), ((m * (m + 2),), "float32"))


def _post_specs(t: int, m: int, h: int) -> tuple:
    return (((t, h), "bfloat16"), ((t, m * h), "bfloat16"), ((t, m), "float32"), ((t, m, m), "float32"))


def _pre(implementation: Any, gates: tuple = GATES) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.mhc_pre(*args, *gates, implementation=implementation))


def _post(implementation: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.mhc_post(*args, implementation=implementation))


def _fused(implementation: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.mhc_fused_post_pre(*args, *GATES, implementation=implementation))


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in CALL_CHIPS:
        out += [
            PublicCase("mhc/pre-t40-m4-h256/fwd", chip, (((40, 4 * 256), "bfloat16"), *_gate_specs(4, 256)),
                       _pre("mosaic_tpu")),
            PublicCase("mhc/post-t40-m4-h256/fwd", chip, _post_specs(40, 4, 256), _post("mosaic_tpu")),
            PublicCase("mhc/fused-post-pre-default-t64-m2-h512/fwd", chip,
                       (*_post_specs(64, 2, 512), *_gate_specs(2, 512)), _fused(None)),
        ]
    # No Sinkhorn iteration: upstream's Op refuses sinkhorn_repeat=0. (A gate projection whose width does
    # not match the residual's is refused too, but differently: upstream's jaxtyping raises a TypeCheckError
    # on the `MH` dimension, this kernel's stand-in checks no dimensions and the Op raises a ValueError.)
    out.append(PublicCase("mhc/pre-no-sinkhorn-refused/fwd", "v6e",
                          (((40, 4 * 256), "bfloat16"), *_gate_specs(4, 256)), _pre("mosaic_tpu", GATES[:4] + (0,))))
    return out
