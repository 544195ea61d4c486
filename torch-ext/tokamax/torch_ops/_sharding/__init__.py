"""DTensors through the Torch ops (`parallelize_module` users, transformers' tensor-parallel plans),
by PyTorch's own mechanisms: `register_sharding` rules where the kernel runs on each rank's shard
unchanged, and code that combines the ranks where it does not (the cross-entropy over a split
vocabulary, grouped matmuls over split experts). A placement an op cannot take is refused with a
NotImplementedError that names the op, the placement and what to do, never DTensor's generic
"does not have a sharding strategy registered". Rules take 1-D meshes.

- `attention`: splash attention split over the batch or the heads.
- `grouped_matmul`: gmm / tgmm over the experts' features; `experts_split_gmm` over the experts.
- `cross_entropy`: the linear softmax cross-entropy over rows or over the vocabulary.
- `vocab_parallel`: the kernel per vocabulary shard and the collectives that combine the shards.
- `placements`: what the rules share.

Registered when `torch_ops` loads (`register`); nothing here runs for plain tensors.
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["is_dtensor", "register"]


def is_dtensor(*tensors: object) -> bool:
    """Whether any of `tensors` is a DTensor (False where torch has no distributed support)."""
    if not dist.is_available():
        return False
    from .placements import is_dtensor as any_dtensor

    return any_dtensor(*tensors)


def register() -> None:
    """Registers every op's DTensor rules (nothing where torch has no distributed support)."""
    if not dist.is_available():
        return
    from . import attention, cross_entropy, grouped_matmul

    for module in (attention, cross_entropy, grouped_matmul):
        module.register()
