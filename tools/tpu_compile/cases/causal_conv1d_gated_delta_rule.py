"""Upstream's causal conv1d + gated delta rule (`ops.tpu.CausalConv1dGatedDeltaRule()`, its Op class: upstream has no
public function) at Qwen3-Next-80B-A3B's Gated DeltaNet shapes (16 key/query heads and 32 value heads of 128, conv
kernel 4) for a serving step: ragged sequences with conv and recurrent state caches; all heads on one chip and the
2-way tensor-parallel share. Forward only (no VJP upstream); v6e and v7x (upstream's Op: generation >= 6)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import QWEN3_NEXT_80B as QWEN

KERNEL_SIZE = 4


def _build(tokens: int, seqs: int, n_kq: int, n_v: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        d, bf16, i32 = QWEN.head_dim, jnp.bfloat16, jnp.int32
        dim = 2 * n_kq * d + n_v * d
        specs = [spec(mesh, (tokens, dim), bf16), spec(mesh, (tokens, n_v), bf16), spec(mesh, (tokens, n_v), bf16),
                 spec(mesh, (seqs + 1, KERNEL_SIZE - 1, dim), bf16), spec(mesh, (seqs + 1, n_v, d, d), jnp.float32),
                 spec(mesh, (dim, 1, KERNEL_SIZE), bf16), spec(mesh, (dim,), bf16), spec(mesh, (n_v,), jnp.float32),
                 spec(mesh, (n_v,), jnp.float32), spec(mesh, (seqs + 1,), i32), spec(mesh, (seqs,), i32),
                 spec(mesh, (3,), i32), spec(mesh, (seqs,), i32)]

        def forward(*args: Any) -> Any:
            return kernel.ops.tpu.CausalConv1dGatedDeltaRule()(*args, n_kq=n_kq, n_v=n_v, d_k=d, d_v=d,
                                                                kernel_size=KERNEL_SIZE)
        return forward, specs
    return build


# (what, tokens, sequences, key/query heads, value heads, tier)
SHAPES = (
    ("mixed-t2048-seqs64-tp1", 2048, 64, 16, 32, "all"),
    ("decode-t256-seqs256-tp1", 256, 256, 16, 32, "all"),
    ("prefill-t8192-seqs4-tp2", 8192, 4, 8, 16, "all"),
)


def cases() -> list[Case]:
    out = []
    for what, t, s, kq, v, tier in SHAPES:
        name = f"causal_conv1d_gated_delta_rule/{QWEN.name}/{what}/fwd"
        out += on_chips(lambda chip, name=name, shape=(t, s, kq, v), tier=tier: Case(
            name, "causal_conv1d_gated_delta_rule", QWEN.name, chip, _build(*shape),
            tier=tier if chip == "v6e" else "all"), ("v6e", "v7x"))
    return out
