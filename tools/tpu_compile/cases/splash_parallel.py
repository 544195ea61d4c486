"""Splash attention (`tokamax.splash.attend`, what the Torch op `splash_attention` runs) split over a pod's
batch and heads, forward and through `jax.grad`: the layout DTensor's rules give the Torch op
(torch_ops/_sharding/attention.py): q over its batch and heads, k and v over their batch and key/value
heads (whole groups of grouped-query attention on each chip), as a `shard_map`.

The point: each chip runs the kernel on its own shard with no collective at all, and holds an
eighth of the arguments.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._models import LLAMA_3_8B, LLAMA_3_70B, Model
from ._pods import bytes_of, check_all

AXES = ("data", "model")
TOKENS = 8192
# model -> (batch, mesh shape over AXES): the heads split over "model", the batch over "data"
SPLITS: dict[str, tuple[int, tuple[int, int]]] = {LLAMA_3_8B.name: (2, (2, 4)), LLAMA_3_70B.name: (1, (1, 8))}
# Kernels: the forward's, and the backward's one (dQ with dK/dV)
KERNELS = 2


def _shapes(model: Model) -> tuple[tuple[int, ...], tuple[int, ...]]:
    batch = SPLITS[model.name][0]
    return (batch, model.heads, TOKENS, model.head_dim), (batch, model.kv_heads, TOKENS, model.head_dim)


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        P = jax.sharding.PartitionSpec
        split = P(*AXES)
        q_shape, kv_shape = _shapes(model)
        specs = [spec(mesh, q_shape, jnp.bfloat16, split), spec(mesh, kv_shape, jnp.bfloat16, split),
                 spec(mesh, kv_shape, jnp.bfloat16, split)]
        causal = kernel.splash.MaskSpec.of(True, None)

        def local(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return kernel.splash.attend(q, k, v, None, None, None, spec=causal)[0]

        attend = jax.shard_map(local, mesh=mesh, in_specs=(split, split, split), out_specs=split, check_vma=False)
        return jax.grad(lambda q, k, v: jnp.sum(jnp.square(attend(q, k, v).astype(jnp.float32))),
                        argnums=(0, 1, 2)), specs
    return build


def _check(model: Model) -> Any:
    q_shape, kv_shape = _shapes(model)

    def check(outcome: Any) -> None:
        check_all(outcome, arguments=(bytes_of(q_shape, 2) + 2 * bytes_of(kv_shape, 2)) // 8, kernels=KERNELS)
        collectives = {k: v for k, v in outcome.hlo.items() if k != "tpu_custom_call" and v}
        assert not collectives, f"{outcome.name}: collectives in a batch/heads split: {collectives}"
    return check


def cases() -> list[Case]:
    out = []
    for model in (LLAMA_3_8B, LLAMA_3_70B):
        for target in ("v6e:2x4", "tpu7x:2x2x1"):
            default = model is LLAMA_3_8B and target == "v6e:2x4"
            out.append(Case(f"splash_parallel/{model.name}/{TOKENS // 1024}k/causal/fwd+bwd", "splash_parallel",
                            model.name, target, _build(model), tier="default" if default else "all", axes=AXES,
                            mesh_shape=SPLITS[model.name][1], check=_check(model)))
    return out
