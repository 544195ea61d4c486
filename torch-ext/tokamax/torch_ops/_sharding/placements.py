"""What the sharding rules share: reading a DTensor's placements, naming them in messages, and the
error every refused placement raises (NotImplementedError, which DTensor's dispatch passes on
unchanged: any other exception it wraps in its own "Sharding propagation failed" message)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import Placement

__all__ = ["DTensor", "Partial", "Replicate", "Shard", "describe", "is_dtensor", "one_dim_mesh", "placement",
           "refuse", "shard_dim"]


def is_dtensor(*tensors: object) -> bool:
    """Whether any of `tensors` is a DTensor."""
    return any(isinstance(t, DTensor) for t in tensors)


def refuse(op: str, message: str) -> NotImplementedError:
    """The error for a placement an op does not take: names the op; `message` says what was given
    and what to do instead."""
    return NotImplementedError(f"tokamax {op}: {message}")


def describe(placements: Sequence[Placement] | None) -> str:
    """Placements as a message shows them: "Shard(1)", "(Shard(0), Replicate())", "a plain tensor"."""
    if placements is None:
        return "a plain tensor"
    names = [repr(p) for p in placements]
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def placement(spec: Any) -> Placement | None:
    """The one placement of a DTensorSpec (register_sharding hands specs to rules) on a 1-D mesh, or
    None for an argument that is not a tensor."""
    if spec is None or not hasattr(spec, "placements"):
        return None
    return spec.placements[0]


def shard_dim(p: Placement | None, ndim: int) -> int | None:
    """The tensor dimension a Shard placement splits (normalised to >= 0), None for any other."""
    if isinstance(p, Shard) and type(p) is Shard:  # not _StridedShard and the like
        return p.dim % ndim
    return None


def one_dim_mesh(op: str, specs: dict[str, Any]) -> None:
    """The rules are written for 1-D meshes (one placement per tensor): refuse others, naming them."""
    for name, spec in specs.items():
        if spec is not None and hasattr(spec, "placements") and len(spec.placements) != 1:
            raise refuse(op, f"{name} is a DTensor on a {len(spec.placements)}-D mesh "
                             f"({describe(spec.placements)}); its sharding rules take 1-D meshes: pass the tensors "
                             "on the sub-mesh of the dimension they are split over (mesh['tp']), or local tensors")

