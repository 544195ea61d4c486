"""Upstream's ragged dot (`tokamax.ops.ragged_dot`, Mosaic) with the experts split over a pod's expert
axis: what each rank runs under `tokamax.torch_ops.gmm` with rhs Shard(0)
(torch_ops/_sharding/grouped_matmul.py, `experts_split_gmm`), written in JAX with the same steps.

Per rank: the routed rows (replicated) rotated so that its own experts' rows come first (a gather: no
data-dependent shape), the kernel on its local experts with their group sizes, rows past them masked,
the rows put back, and the partial sums reduced over the ranks (one all-reduce of the output; its
backward, one of dx). Forward and through `jax.grad`, gate/up projections, 8,192 tokens routed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, spec
from ._models import DEEPSEEK_V3, MIXTRAL_8X7B, QWEN3_30B_A3B, Model
from ._pods import bytes_of, check_all

RANKS = 8
AXIS = "ep"
TOKENS = 8192


@jax.custom_vjp
def _reduced(y: jax.Array) -> jax.Array:
    """The ranks' partial sums, reduced: DTensor's Partial -> Replicate, whose backward passes each rank
    the replicated cotangent as it is (the reduction of dx happens where the rows enter, once)."""
    return jax.lax.psum(y, AXIS)


_reduced.defvjp(lambda y: (jax.lax.psum(y, AXIS), None), lambda _, g: (g,))


def local_experts(kernel: Any, lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """One rank's rows times its experts, zeros elsewhere (`_local_experts`), summed over the ranks."""
    groups, rows = rhs.shape[0], lhs.shape[0]
    first = jax.lax.axis_index(AXIS) * groups
    sizes = group_sizes.astype(jnp.int32)
    before = jnp.sum(jnp.where(jnp.arange(sizes.shape[0]) < first, sizes, 0))
    local_sizes = jax.lax.dynamic_slice_in_dim(sizes, first, groups)
    position = jnp.arange(rows)
    order = (position + before) % rows
    mine = (position < jnp.sum(local_sizes))[:, None]
    x = jnp.where(mine, lhs[order], 0)
    y = jnp.where(mine, kernel.ops.ragged_dot(x, rhs, local_sizes, implementation="mosaic"), 0)
    return _reduced(jnp.zeros_like(y).at[order].set(y))


def _build(model: Model) -> Any:
    def build(kernel: Any, mesh: Any) -> Any:
        P = jax.sharding.PartitionSpec
        m, k, n = TOKENS * model.experts_per_token, model.hidden, 2 * model.intermediate
        specs = [spec(mesh, (m, k), jnp.bfloat16), spec(mesh, (model.experts, k, n), jnp.bfloat16, (AXIS,)),
                 spec(mesh, (model.experts,), jnp.int32)]
        forward = jax.shard_map(lambda x, w, s: local_experts(kernel, x, w, s), mesh=mesh,
                                in_specs=(P(), P(AXIS), P()), out_specs=P(), check_vma=False)
        return jax.grad(lambda x, w, s: jnp.sum(jnp.square(forward(x, w, s).astype(jnp.float32))),
                        argnums=(0, 1)), specs
    return build


def _check(model: Model) -> Any:
    m, k, n = TOKENS * model.experts_per_token, model.hidden, 2 * model.intermediate
    weights = bytes_of((model.experts, k, n), 2)

    def check(outcome: Any) -> None:
        # forward gmm; backward gmm (dx) and tgmm (dw); after each gmm the zeros past the groups (padded_rows):
        # five kernels on each rank
        check_all(outcome, arguments=bytes_of((m, k), 2) + weights // RANKS + 4 * model.experts, kernels=5,
                  temp_below=weights // RANKS + 4 * bytes_of((m, max(k, n)), 4))
        hlo, largest = outcome.hlo, outcome.largest
        assert hlo["all-reduce"] == 2, f"{outcome.name}: {hlo['all-reduce']} all-reduces, expected out's and dx's"
        assert hlo["all-gather"] == 0, f"{outcome.name}: the experts' weights are gathered ({hlo['all-gather']})"
        assert largest["all-reduce"] <= bytes_of((m, max(k, n)), 4), \
            f"{outcome.name}: an all-reduce of {largest['all-reduce']} bytes, more than the routed rows"
    return check


def cases() -> list[Case]:
    out = []
    for model in (QWEN3_30B_A3B, MIXTRAL_8X7B, DEEPSEEK_V3):
        for target in ("v6e:2x4", "tpu7x:2x2x1"):
            default = model is QWEN3_30B_A3B and target == "v6e:2x4"  # 16 experts per chip
            out.append(Case(f"experts_parallel/{model.name}/gate-up/fwd+bwd", "experts_parallel", model.name, target,
                            _build(model), tier="default" if default else "all", axes=(AXIS,), check=_check(model)))
    return out
