"""Public fused MoE decode calls (upstream's `_src.ops.experimental.fused_moe_decode.api.fused_moe_decode`,
which upstream does not re-export) on TPU7x, the only chip upstream runs it on; no VJP. One rank
(n_ranks=1) under the lowering's one-device TPU mesh: a gated shared expert with whole-expert
weight streaming, and an ungated one with expert parallel offsets, a routed scale and 128-wide
intermediate blocks (a caller's config); and the call made outside `shard_map`, which fails as
upstream's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import PartitionSpec

from .cases import PublicCase

TABLES: list = []  # no fused MoE decode table ships
API = "_src.ops.experimental.fused_moe_decode.api"
H, INTER, INTER_S, E = 512, 256, 128, 8  # hidden, routed and shared intermediate slices, local experts


def _specs(tokens: int, k: int, gated: bool) -> tuple:
    gate = (((H, 1), "bfloat16"),) if gated else ()
    return (((1,), "int32"), ((tokens, H), "bfloat16"), ((E, H, 2 * INTER), "float8_e4m3fn"),
            ((E, INTER, H), "float8_e4m3fn"), ((E, 1, 1, 2 * INTER), "float32"), ((E, 1, 1, H), "float32"),
            ((H, 2 * INTER_S), "float8_e4m3fn"), ((1, 2 * INTER_S), "float32"), ((INTER_S, H), "float8_e4m3fn"),
            ((1, H), "float32"), *gate, ((tokens, k), "bfloat16"), ((tokens, k), "int32"))


def _forward(gated: bool, config: dict | None = None, mapped: bool = True,
             **kw: Any) -> Callable[[Any], Callable[..., Any]]:
    def build(api: Any) -> Callable[..., Any]:
        implementation = "mosaic_tpu"
        if config is not None:
            module = api.module("_src.ops.experimental.fused_moe_decode.pallas_mosaic_tpu")
            implementation = [module.PallasMosaicTpuFusedMoeDecode(config=module.Config(**config))]

        def call(*args: Any) -> Any:
            if not gated:
                args = (*args[:10], None, *args[10:])
            return api.module(API).fused_moe_decode(*args, n_ranks=1, implementation=implementation, **kw)

        def on_one_rank(*args: Any) -> Any:  # the kernel signals its peers: it runs inside shard_map
            return jax.shard_map(call, mesh=jax.sharding.get_abstract_mesh(), in_specs=PartitionSpec(),
                                 out_specs=PartitionSpec(), check_vma=False)(*args)
        return on_one_rank if mapped else call
    return build


def cases() -> list[PublicCase]:
    return [
        PublicCase("fused_moe_decode/gated-t7-k3-e8/fwd", "v7x", _specs(7, 3, True), _forward(True)),
        PublicCase("fused_moe_decode/ep-ungated-iblock128-t6-k3/fwd", "v7x", _specs(6, 3, False),
                   _forward(False, {"i_block": 128, "num_buffers": 3}, expert_start=8, routed_scale=2.5)),
        # Called straight under the lowering's abstract mesh (no shard_map), upstream's Op takes the mesh for
        # a shard_map context and calls the kernel as is, whose peer signals Pallas then refuses.
        PublicCase("fused_moe_decode/outside-shard-map-refused/fwd", "v7x", _specs(7, 3, True),
                   _forward(True, mapped=False)),
    ]
