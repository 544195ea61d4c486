"""Upstream's fused MoE decode (`ops.experimental.fused_moe_decode`, upstream's `fused_moe_decode` checked
first: routed experts, the shared expert and the all-reduce in one kernel; no VJP) at DeepSeek-V3's shapes
on one rank (all 256 fp8 experts local, per-channel scales, the ungated shared expert of 2,048, routed
scale 2.5). TPU7x only, as upstream; the kernel signals its peers, so the call runs inside `shard_map`.

The shared expert (42 MiB in fp8), the weight ring and every token's buffers share the 64 MiB of VMEM:
a decode batch of 64 compiles, MOST tokens is the largest that does, and 256 (which the compiler
refused: "Used 83.07M of 63.94M vmem") is refused by this kernel first."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from ..case import COMPILES, Case, spec
from ._models import DEEPSEEK_V3

MOST = 96  # the most tokens one call takes at these shapes (112 did not compile: "Used 64.44M of 63.94M")
REFUSED = "256 tokens (hidden's rows) need"
ROUTED_SCALE = 2.5  # DeepSeek-V3's routed_scaling_factor
SHARED_INTER = 2048  # its one shared expert's intermediate size


def _build(tokens: int) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        m = DEEPSEEK_V3
        e, h, i, k, fp8 = m.experts, m.hidden, m.intermediate, m.experts_per_token, jnp.float8_e4m3fn
        specs = [spec(mesh, (1,), jnp.int32), spec(mesh, (tokens, h), jnp.bfloat16), spec(mesh, (e, h, 2 * i), fp8),
                 spec(mesh, (e, i, h), fp8), spec(mesh, (e, 1, 1, 2 * i), jnp.float32),
                 spec(mesh, (e, 1, 1, h), jnp.float32), spec(mesh, (h, 2 * SHARED_INTER), fp8),
                 spec(mesh, (1, 2 * SHARED_INTER), jnp.float32), spec(mesh, (SHARED_INTER, h), fp8),
                 spec(mesh, (1, h), jnp.float32), spec(mesh, (tokens, k), jnp.bfloat16),
                 spec(mesh, (tokens, k), jnp.int32)]

        def call(*args: Any) -> Any:
            return kernel.ops.experimental.fused_moe_decode(
                *args[:10], None, *args[10:], n_ranks=1, routed_scale=ROUTED_SCALE, axis_name=mesh.axis_names[0],
                implementation="mosaic_tpu")

        return jax.shard_map(call, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(),
                             check_vma=False), specs
    return build


def cases() -> list[Case]:
    return [Case(f"fused_moe_decode/{DEEPSEEK_V3.name}/t{tokens}-k8-e256/fwd", "fused_moe_decode",
                 DEEPSEEK_V3.name, "v7x", _build(tokens), expect=expect, tier="default" if tokens == 64 else "all")
            for tokens, expect in ((64, COMPILES), (MOST, COMPILES), (256, REFUSED))]
