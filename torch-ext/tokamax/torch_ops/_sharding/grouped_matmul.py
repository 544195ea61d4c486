"""DTensor sharding rules of the grouped-matmul custom ops (`gmm_op`, `gmm_bwd_op`, `tgmm_op`), and the
experts split that no rule can express (`experts_split_gmm`).

With the experts' weights split over their features, the kernel runs on each rank's shard
unchanged (what tensor-parallel MoE layers do): rhs [groups, k, n] split over n (lhs replicated; out
split over its columns) or over k (lhs split over its columns; out a Partial sum). DTensor picks
the cheaper of those (or everything replicated) for the placements given. A split over lhs's rows
is refused: the rows belong to groups by `group_sizes`, which DTensor's even split does not follow.

With the experts themselves split (rhs Shard(0): each rank holds whole experts, the tokens
replicated), each rank must multiply only the rows routed to its experts, which the same op on the
local shards does not do; `gmm` (what users call) runs `experts_split_gmm` for it instead, and the
custom ops refuse that split, pointing there.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor.experimental import local_map, register_sharding

from .._grouped_ops import gmm_bwd_op, gmm_op, tgmm_op
from .._tuned import current_token
from .placements import DTensor, Partial, Replicate, Shard, describe, one_dim_mesh, placement, refuse, shard_dim

__all__ = ["experts_split_gmm", "register", "wants_experts_split"]


def _check(op: str, lhs: object, rhs: object, group_sizes: object) -> None:
    one_dim_mesh(op, {"lhs": lhs, "rhs": rhs, "group_sizes": group_sizes})
    if shard_dim(placement(rhs), 3) == 0:
        raise refuse(op, "rhs is split over its experts (Shard(0)); the custom op would multiply each rank's "
                         "experts with the wrong rows: call tokamax.torch_ops.gmm, which routes each rank's rows "
                         "to its experts (lhs and group_sizes replicated)")
    if shard_dim(placement(lhs), 2) == 0:
        raise refuse(op, "lhs is split over its rows (Shard(0)); rows belong to experts by group_sizes, which an "
                         "even split does not follow: replicate lhs (and group_sizes), or run the op on each rank's "
                         "own rows as plain tensors (tokens dispatched to their experts' ranks)")
    for name, spec in (("lhs", lhs), ("rhs", rhs), ("group_sizes", group_sizes)):
        if isinstance(placement(spec), Partial):
            raise refuse(op, f"{name} is a Partial sum; reduce it first (redistribute to Replicate())")


def _gmm(lhs: object, rhs: object, group_sizes: object, transpose_rhs: bool, autotuning: str) -> list:
    _check("gmm", lhs, rhs, group_sizes)
    n_dim, k_dim = (1, 2) if transpose_rhs else (2, 1)
    statics = [None, None]
    return [([Replicate()], [Replicate(), Replicate(), Replicate(), *statics]),
            ([Shard(1)], [Replicate(), Shard(n_dim), Replicate(), *statics]),
            ([Partial()], [Shard(1), Shard(k_dim), Replicate(), *statics])]


def _gmm_bwd(lhs: object, rhs: object, group_sizes: object, grad: object, transpose_rhs: bool,
             autotuning: str) -> list:
    _check("gmm_bwd", lhs, rhs, group_sizes)
    n_dim, k_dim = (1, 2) if transpose_rhs else (2, 1)
    statics = [None, None]
    return [([Replicate(), Replicate()], [Replicate(), Replicate(), Replicate(), Replicate(), *statics]),
            ([Partial(), Shard(n_dim)], [Replicate(), Shard(n_dim), Replicate(), Shard(1), *statics]),
            ([Shard(1), Shard(k_dim)], [Shard(1), Shard(k_dim), Replicate(), Replicate(), *statics])]


def _tgmm(lhs: object, grad: object, group_sizes: object, autotuning: str) -> list:
    _check("tgmm", lhs, None, group_sizes)
    if shard_dim(placement(grad), 2) == 0:
        raise refuse("tgmm", "grad is split over its rows (Shard(0)); rows belong to groups by group_sizes: "
                             "replicate it, or split its columns (Shard(1))")
    return [([Replicate()], [Replicate(), Replicate(), Replicate(), None]),
            ([Shard(2)], [Replicate(), Shard(1), Replicate(), None]),
            ([Shard(1)], [Shard(1), Replicate(), Replicate(), None])]


def register() -> None:
    """Registers the three ops' rules with DTensor. Their placements depend on `transpose_rhs`, a bool,
    which register_sharding leaves out of DTensor's cache key (it keys on int arguments only), so the
    ops' schema info is set to key on every argument after the tensors."""
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    propagator = DTensor._op_dispatcher.sharding_propagator
    for op, rule, tensors in ((gmm_op, _gmm, 3), (gmm_bwd_op, _gmm_bwd, 4), (tgmm_op, _tgmm, 3)):
        register_sharding(op._opoverload)(rule)
        propagator.op_to_schema_info[op._opoverload] = RuntimeSchemaInfo(static_argnum=tensors, needs_pytree=True)


# ---- The experts split: each rank's rows to its own experts ------------------------------------
def wants_experts_split(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> bool:
    """rhs a DTensor split over its experts."""
    return isinstance(rhs, DTensor) and rhs.placements == (Shard(0),)


def _local_experts(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, transpose_rhs: bool,
                   first_group: int) -> torch.Tensor:
    """On one rank: the rows of groups [first_group, first_group + local groups) times the local
    experts, zeros elsewhere. The rows are rotated so that this rank's come first (a gather: no
    data-dependent shape, so one export serves every routing), and the rows past them masked on the
    way in and out (the kernel gives zeros past the group sizes' sum, forward and backward)."""
    groups, rows = rhs.shape[0], lhs.shape[0]
    before = group_sizes[:first_group].to(torch.int64).sum()
    local_sizes = group_sizes[first_group:first_group + groups].contiguous()
    position = torch.arange(rows, device=lhs.device)
    order = (position + before) % rows
    mine = (position < local_sizes.to(torch.int64).sum())[:, None]
    x = torch.where(mine, lhs[order], 0)
    y = torch.where(mine, gmm_op(x.contiguous(), rhs.contiguous(), local_sizes.contiguous(), transpose_rhs,
                                 current_token()), 0)
    return torch.empty_like(y).index_copy(0, order, y)


def experts_split_gmm(lhs: torch.Tensor, rhs: DTensor, group_sizes: torch.Tensor, *, transpose_rhs: bool
                      ) -> DTensor:
    """gmm with rhs split over its experts (Shard(0), each rank whole experts) and lhs and group_sizes
    replicated (plain tensors count as replicated): out [m, n] a Partial sum, each rank's rows those
    routed to its experts. The gradients: lhs's a Partial sum, rhs's split as rhs."""
    mesh = rhs.device_mesh
    for name, t in (("lhs", lhs), ("group_sizes", group_sizes)):
        if isinstance(t, DTensor) and (t.device_mesh != mesh or t.placements != (Replicate(),)):
            raise refuse("gmm", f"rhs is split over its experts, so {name} must be replicated on its mesh, got "
                                f"{describe(t.placements)}: redistribute it to Replicate()")
    experts, world = rhs.shape[0], mesh.size()
    if experts % world:
        raise refuse("gmm", f"rhs's {experts} experts do not divide by {world} ranks; split them evenly")
    first_group = mesh.get_local_rank() * (experts // world)
    lhs = lhs if isinstance(lhs, DTensor) else DTensor.from_local(lhs, mesh, [Replicate()], run_check=False)
    sizes = group_sizes.to_local() if isinstance(group_sizes, DTensor) else group_sizes

    def local(lhs: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        return _local_experts(lhs, rhs, sizes, transpose_rhs, first_group)

    run = local_map(local, out_placements=[Partial()], in_placements=([Replicate()], [Shard(0)]),
                    in_grad_placements=([Partial()], [Shard(0)]), device_mesh=mesh)
    return run(lhs, rhs)
