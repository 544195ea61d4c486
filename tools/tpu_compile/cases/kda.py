"""Upstream's Kimi delta attention (`ops.kimi_delta_attention(implementation="mosaic")`) at Kimi Linear's shapes (32
heads of 128 in each KDA layer), forward and through `jax.grad` (upstream's VJP Op runs its backward kernels): the
gate activation fused in the kernel with L2-normalised q/k, as Kimi Linear runs it, over 4k- and 32k-token training
sequences. v6e and v7x (upstream's Op: generation >= 6)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from ._models import KIMI_LINEAR as KIMI


def _build(batch: int, length: int, grad: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        h, d = KIMI.heads, KIMI.head_dim
        specs = [spec(mesh, (h, batch, length, d), jnp.bfloat16) for _ in range(4)]
        specs += [spec(mesh, (h, batch, length), jnp.bfloat16), spec(mesh, (h,), jnp.float32),
                  spec(mesh, (h * d,), jnp.float32)]

        def forward(q: Any, k: Any, v: Any, g: Any, beta: Any, a_log: Any, dt_bias: Any) -> Any:
            out, _ = kernel.ops.kimi_delta_attention(q, k, v, g, beta, a_log=a_log, delta_time_bias=dt_bias,
                                                     use_gate_in_kernel=True, lower_bound=-5.0,
                                                     use_qk_l2norm=True, implementation="mosaic")
            return out

        if not grad:
            return forward, specs
        return jax.grad(lambda *a: jnp.sum(jnp.square(forward(*a).astype(jnp.float32))),
                        argnums=(0, 1, 2, 3, 4)), specs
    return build


def cases() -> list[Case]:
    out = []
    for batch, length, tier in ((1, 4096, "default"), (1, 32768, "all"), (8, 4096, "all")):
        for grad in (True, False):
            name = f"kda/{KIMI.name}/b{batch}-t{length}/{'fwd+bwd' if grad else 'fwd'}"
            out += on_chips(lambda chip, name=name, b=batch, t=length, g=grad, tier=tier: Case(
                name, "kda", KIMI.name, chip, _build(b, t, g),
                tier=tier if (chip == "v6e" and g) else "all"), ("v6e", "v7x"))
    return out
