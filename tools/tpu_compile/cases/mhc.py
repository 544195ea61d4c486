"""Upstream's mHC hyper-connections (`tokamax.ops.mhc_pre`, `mhc_post`, `mhc_fused_post_pre`; no VJP)
at DeepSeek-V4's shapes (hidden 7,168, 4 residual streams, the 1e-6 eps and 20 Sinkhorn steps),
8,192 tokens, on v5e, v6e and TPU7x (upstream's Ops: generation 5 and newer)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import DEEPSEEK_V4, DSV4_HC_MULT

TOKENS = 8192
GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)  # rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat
M, H = DSV4_HC_MULT, DEEPSEEK_V4.hidden


def _gate_specs(mesh: Any) -> list:
    return [spec(mesh, (M * (M + 2), M * H), jnp.float32), spec(mesh, (3,), jnp.float32),
            spec(mesh, (M * (M + 2),), jnp.float32)]


def _post_specs(mesh: Any) -> list:
    return [spec(mesh, (TOKENS, H), jnp.bfloat16), spec(mesh, (TOKENS, M * H), jnp.bfloat16),
            spec(mesh, (TOKENS, M), jnp.float32), spec(mesh, (TOKENS, M, M), jnp.float32)]


def _pre(kernel: Any, mesh: Any) -> Any:
    return (lambda *a: kernel.ops.mhc_pre(*a, *GATES, implementation="mosaic_tpu"),
            [spec(mesh, (TOKENS, M * H), jnp.bfloat16), *_gate_specs(mesh)])


def _post(kernel: Any, mesh: Any) -> Any:
    return lambda *a: kernel.ops.mhc_post(*a, implementation="mosaic_tpu"), _post_specs(mesh)


def _fused(kernel: Any, mesh: Any) -> Any:
    return (lambda *a: kernel.ops.mhc_fused_post_pre(*a, *GATES, implementation="mosaic_tpu"),
            [*_post_specs(mesh), *_gate_specs(mesh)])


def cases() -> list[Case]:
    out = []
    for what, build in (("pre", _pre), ("post", _post), ("fused-post-pre", _fused)):
        out += on_chips(lambda chip, what=what, build=build: Case(
            f"mhc/{DEEPSEEK_V4.name}/{what}-t{TOKENS}-m{M}-h{H}/fwd", "mhc", DEEPSEEK_V4.name, chip, build,
            tier="default" if (what == "post" and chip == "v7x") else "all"))
    return out
