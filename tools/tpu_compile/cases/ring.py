"""Our ring attention (`tokamax.ring.attention`) over the 8 devices of a pod, forward and through
`jax.grad`, at Llama 3 8B's attention (32 heads, 8 KV heads, head dim 128, causal) over 32,768 and
131,072 tokens, in the plain (contiguous) and load-balanced (head-tail) layouts.

What the compiled program must show: K/V pass round the ring by collective-permutes of one chip's
block (never an all-gather of the whole K/V), one kernel call per run per step (1 run plain, 2
load-balanced), and each chip's arguments an eighth of the whole.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._models import LLAMA_3_8B, Model
from ._pods import bytes_of, check_all

RING = 8  # devices on the ring: v6e:2x4's 8 chips, tpu7x:2x2x1's 4 chips of 2 TensorCores each
AXIS = "sp"
# Kernel calls per ring run and step: the forward's, and the backward's one (upstream's
# `_splash_attention_bwd` computes dQ with dK/dV in one kernel).
FORWARD_KERNELS, BACKWARD_KERNELS = 1, 1


def _shapes(model: Model, tokens: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (1, model.heads, tokens, model.head_dim), (1, model.kv_heads, tokens, model.head_dim)


def _build(model: Model, tokens: int, balanced: bool) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        layout = kernel.ring.Layout(mesh, axis=AXIS, batch_axis=None, head_axis=None, mqa=False, causal=True,
                                    balanced=balanced)
        attention = kernel.ring.attention(layout)
        q_shape, kv_shape = _shapes(model, tokens)
        specs = [spec(mesh, q_shape, jnp.bfloat16, layout.q), spec(mesh, kv_shape, jnp.bfloat16, layout.kv),
                 spec(mesh, kv_shape, jnp.bfloat16, layout.kv)]
        return jax.grad(lambda q, k, v: jnp.sum(jnp.square(attention(q, k, v).astype(jnp.float32))),
                        argnums=(0, 1, 2)), specs
    return build


def _check(model: Model, tokens: int, balanced: bool) -> Any:
    q_shape, kv_shape = _shapes(model, tokens)
    runs = 2 if balanced else 1
    block = bytes_of(kv_shape, 2) // RING  # one chip's K (or V)

    def check(outcome: Any) -> None:
        check_all(outcome, arguments=(bytes_of(q_shape, 2) + 2 * bytes_of(kv_shape, 2)) // RING,
                  kernels=RING * runs * (FORWARD_KERNELS + BACKWARD_KERNELS))
        hlo, largest = outcome.hlo, outcome.largest
        # K and V (and dK, dV) pass at each of the ring's steps but the last
        assert hlo["collective-permute"] >= 4 * (RING - 1), \
            f"{outcome.name}: {hlo['collective-permute']} collective-permutes: K/V do not pass round the ring"
        assert hlo["all-gather"] == 0, f"{outcome.name}: {hlo['all-gather']} all-gathers (K/V are gathered)"
        assert largest["collective-permute"] <= block * 2, \
            f"{outcome.name}: a collective-permute of {largest['collective-permute']} bytes, more than one chip's " \
            f"K/V block ({block} bytes, its f32 gradient twice that)"
    return check


def cases() -> list[Case]:
    out = []
    for target in ("v6e:2x4", "tpu7x:2x2x1"):
        for tokens in (32768, 131072):
            for balanced in (False, True):
                default = target == "v6e:2x4" and tokens == 32768 and not balanced
                layout = "load-balanced" if balanced else "plain"
                out.append(Case(f"ring/{LLAMA_3_8B.name}/{tokens // 1024}k/{layout}/fwd+bwd", "ring", LLAMA_3_8B.name,
                                target, _build(LLAMA_3_8B, tokens, balanced), tier="default" if default else "all",
                                axes=(AXIS,), check=_check(LLAMA_3_8B, tokens, balanced)))
    # shards off the kernel's 128-token blocks: plain 8 x 4,160 tokens; load-balanced 8 x 4,224 (head-tail
    # chunks of 2,112)
    for tokens, balanced in ((8 * 4160, False), (8 * 4224, True)):
        layout = "load-balanced" if balanced else "plain"
        out.append(Case(f"ring/{LLAMA_3_8B.name}/{tokens}/{layout}/fwd+bwd", "ring", LLAMA_3_8B.name, "v6e:2x4",
                        _build(LLAMA_3_8B, tokens, balanced), expect="multiple of 128", axes=(AXIS,)))
    return out
