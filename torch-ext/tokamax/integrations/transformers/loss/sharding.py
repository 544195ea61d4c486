"""The LM head's weight as the fused loss needs it under PyTorch's and transformers' sharding.

The loss runs after the head's forward (the model calls its loss function on what the head
returned), with `lm_head.weight` read then:

- transformers' tensor-parallel plan: the weight is a DTensor split over the vocabulary, and every
  rank holds the same hidden states (the plan's own forward would make them a replicated DTensor):
  the loss is vocabulary-parallel over that mesh (`tensor_parallel_mesh`).
- FSDP2: the weight is whole (a plain tensor) only while the FSDP unit that holds it has it
  gathered; a unit that reshards after forward (`fully_shard(model.lm_head)`'s default) has put its
  sharded DTensor back by the time the loss runs, and the step would read each rank's rows of the
  weight as a vocabulary split. `weight_kept_gathered` keeps that unit's parameters gathered from
  its forward to its backward, for training steps only, as FSDP keeps the root's; the backward
  needs them again there anyway.
- anything else that leaves a DTensor weight after the head's forward is refused (`check_weight`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


def _dtensor(t: object) -> bool:
    import torch.distributed as dist

    if not dist.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def tensor_parallel_mesh(head: torch.nn.Module) -> Any:
    """The device mesh of a head that transformers' tensor-parallel plan split (its forward, set on the
    instance, and its weight a DTensor), or None."""
    if "forward" in head.__dict__ and _dtensor(head.weight):
        return head.weight.device_mesh
    return None


def check_weight(name: str, head: torch.nn.Module) -> None:
    """Refuses a DTensor weight the loss cannot place (not transformers' tensor-parallel plan)."""
    if _dtensor(head.weight) and tensor_parallel_mesh(head) is None:
        raise NotImplementedError(
            f"tokamax use_fused_loss: {name}'s lm_head.weight is a DTensor ({head.weight.placements}) after the "
            "head's forward, outside transformers' tensor-parallel plan (e.g. a sharding wrapper that reshards it "
            "after the forward); the fused loss needs the whole weight, or transformers' vocabulary split with "
            "the same hidden states on every rank: shard the head with FSDP2's fully_shard, or with "
            "transformers' tp_plan")


def _fsdp_units(model: torch.nn.Module, head: torch.nn.Module) -> list[Any]:
    """The FSDP2 units from the head up to the model (the head's own first, if it is one)."""
    import torch.distributed as dist

    if not dist.is_available():
        return []
    from torch.distributed.fsdp import FSDPModule

    path = {m: n for n, m in model.named_modules()}.get(head)
    if path is None:
        return []
    parts = path.split(".") if path else []
    chain = [model.get_submodule(".".join(parts[:depth])) for depth in range(len(parts), -1, -1)]
    return [m for m in chain if isinstance(m, FSDPModule)]


def _reshards_after_forward(unit: Any, outermost: bool) -> bool:
    """Whether FSDP2 puts `unit`'s sharded parameters back after its forward. Read from FSDP's state
    (torch 2.11 to 2.15): the outermost unit left at its default is the root, which FSDP never
    reshards after forward; where the state is not found, True (the step then keeps them gathered)."""
    state = unit._get_fsdp_state()
    if outermost and getattr(state, "_auto_reshard_after_forward", False):
        return False
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        return True
    return any(getattr(g, "post_forward_mesh_info", True) is not None for g in groups)


@contextlib.contextmanager
def weight_kept_gathered(model: torch.nn.Module, head: torch.nn.Module) -> Iterator[None]:
    """Within the block (one training forward), the FSDP2 unit holding the head's weight keeps it
    gathered after its forward; its setting is put back after."""
    units = _fsdp_units(model, head)
    if not units or not _reshards_after_forward(units[0], outermost=len(units) == 1):
        yield
        return
    units[0].set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        units[0].set_reshard_after_forward(True, recurse=False)
