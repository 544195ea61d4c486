"""Public experimental fused MoE calls (upstream's `fused_moe(implementation="mosaic_tpu")`, `_src.ops.experimental.
fused_moe.api`, the function behind `ops.experimental.tpu.FusedMoe`) on every chip (upstream's Op supports
generation >= 5), forward only (no VJP upstream): bf16 weights, and fp8 weights with per-channel scales. Upstream
ships no fused MoE table. Upstream's Op type-checks `mesh` as a concrete `Mesh` (an `AbstractMesh` is refused with
a TypeCheckError), so the call gets a one-device CPU `Mesh` named like the abstract TPU mesh and is traced under
that mesh's abstract form (shard_map wants the context mesh to match); the emulated chip still answers
`get_tpu_info`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .cases import CALL_CHIPS, PublicCase, Table

TABLES: list[Table] = []
API = "_src.ops.experimental.fused_moe.api"


def _specs(tokens: int, hidden: int, inter: int, experts: int, weights: str, scales: bool) -> tuple:
    specs = (((tokens, hidden), "bfloat16"), ((experts, hidden, 2 * inter), weights),
             ((experts, inter, hidden), weights), ((tokens, experts), "float32"))
    return specs + ((((experts, 2 * inter), "float32"), ((experts, hidden), "float32")) if scales else ())


def _mesh() -> jax.sharding.Mesh:
    """A one-device concrete mesh named like the abstract one: upstream's Op type-checks `mesh` as a `Mesh`."""
    return jax.sharding.Mesh(np.array(jax.devices()[:1]), jax.sharding.get_abstract_mesh().axis_names)


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        def call(x: Any, w1: Any, w2: Any, gating: Any, *scales: Any) -> Any:
            w1_scale, w2_scale = scales or (None, None)
            mesh = _mesh()
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                return api.module(API).fused_moe(x, w1, w2, gating, w1_scale=w1_scale, w2_scale=w2_scale,
                                                 mesh=mesh, implementation="mosaic_tpu", **kw)

        return call

    return build


def cases() -> list[PublicCase]:
    calls = [
        ("bf16-t32-h256-i256-e4-top2", _specs(32, 256, 256, 4, "bfloat16", False), _forward(topk=2)),
        ("fp8-t64-h512-i256-e8-top2", _specs(64, 512, 256, 8, "float8_e4m3fn", True),
         _forward(topk=2, renormalize=False)),
    ]
    return [PublicCase(f"fused_moe/mosaic/{name}", chip, specs, build)
            for chip in CALL_CHIPS for name, specs, build in calls]
