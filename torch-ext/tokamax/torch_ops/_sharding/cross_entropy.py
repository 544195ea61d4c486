"""DTensors through `linear_softmax_cross_entropy_loss`: x [rows, hidden], labels [rows], w [hidden,
vocab], all DTensors on one 1-D mesh:

- all replicated: the op on the local tensors (every rank computes the whole loss);
- rows split (x and labels Shard(0), w replicated): the op on each rank's rows; "none" and lse come
  back Shard(0), "sum" and "mean" replicated (one all-reduce of 2 floats: the rows' sum and count);
  dw is each rank's partial sum (DTensor's Partial, reduced where w's gradient is replicated);
- vocabulary split (w Shard(1), x and labels replicated): `vocab_parallel`, the kernel per shard.

Anything else is refused with what to do instead, and so is a plain tensor beside DTensors: whether
it is the same on every rank or this rank's part decides the loss and which gradients need reducing,
and a plain tensor does not say (read as replicated, a data-parallel x would combine different rows'
log-sum-exps, and a plain w would keep one rank's part of its gradient). The custom ops themselves (upstream's public op
and the per-row op, which pads rows to 128 per call, so a rows split changes their output shape)
take replicated DTensors only and point anything else here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed.tensor.experimental import register_sharding

from ..linear_softmax_cross_entropy import custom_ops
from ..linear_softmax_cross_entropy.labels import out_of_range, poisoned
from .placements import DTensor, Partial, Replicate, Shard, describe, one_dim_mesh, placement, refuse
from .vocab_parallel import shard_columns, vocab_parallel_rows

__all__ = ["loss", "register"]

OP = "linear_softmax_cross_entropy_loss"
Plain = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _mesh_and_placements(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> tuple:
    given = {"x": x, "labels": labels, "w": w}
    dtensors = {n: t for n, t in given.items() if isinstance(t, DTensor)}
    meshes = {t.device_mesh for t in dtensors.values()}
    if len(meshes) > 1:
        raise refuse(OP, f"{', '.join(dtensors)} are DTensors on different meshes; put them on one mesh")
    mesh = next(iter(meshes))
    one_dim_mesh(OP, {n: t._spec for n, t in dtensors.items()})
    plain = [n for n in given if n not in dtensors]
    if plain:
        split = ", ".join(f"{n} {describe(t.placements)}" for n, t in dtensors.items())
        raise refuse(OP, f"{' and '.join(plain)} {'is a plain tensor' if len(plain) == 1 else 'are plain tensors'} "
                         f"beside DTensors ({split}); a plain tensor does not say whether every rank holds it whole or "
                         "its own part, which decides the loss and its gradients: give every argument as a DTensor "
                         "on one mesh (DTensor.from_local(t, mesh, [Replicate()]) for a tensor every rank holds "
                         "whole, [Shard(0)] for x's and labels' rows on each rank), or only plain tensors")
    return mesh, {n: t.placements[0] for n, t in given.items()}


def _replicated_local(t: DTensor) -> torch.Tensor:
    """A replicated DTensor's local tensor, its gradient replicated too (our backward all-reduces it)."""
    return t.to_local(grad_placements=[Replicate()])


def _reduce(losses: torch.Tensor, valid: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return losses
    total = losses.sum()
    return total if reduction == "sum" else total / valid.sum()


def _vocabulary(x: torch.Tensor, labels: torch.Tensor, w: DTensor, reduction: str, ignore_index: int | None,
                mesh: object) -> tuple[torch.Tensor, torch.Tensor]:
    w_local = w.to_local()  # its gradient comes back as w's Shard(1)
    vocab, world, index = w.shape[1], mesh.size(), mesh.get_local_rank()
    start, size = shard_columns(vocab, world, index)
    if w_local.shape[1] != size:
        raise refuse(OP, f"w's local shard has {w_local.shape[1]} of {vocab} columns on rank {index} of {world}, "
                         f"where DTensor's Shard(1) split puts {size}; the vocabulary-parallel loss takes that split")
    x_local, labels_local = _replicated_local(x), _replicated_local(labels)
    bad = out_of_range(OP, labels_local, vocab, ignore_index)
    valid = torch.ones_like(labels_local, dtype=torch.bool) if ignore_index is None else labels_local != ignore_index
    valid &= ~bad
    losses, lse = vocab_parallel_rows(x_local, labels_local, valid, w_local, start, mesh.get_group())
    out = _reduce(poisoned(losses, bad), valid, reduction)
    return (DTensor.from_local(out, mesh, [Replicate()], run_check=False),
            DTensor.from_local(lse, mesh, [Replicate()], run_check=False))


def _rows(plain: Plain, x: DTensor, labels: DTensor, w: DTensor, reduction: str, ignore_index: int | None,
          mesh: object) -> tuple[torch.Tensor, torch.Tensor]:
    w_local = w.to_local(grad_placements=[Partial()])
    x_local, labels_local = x.to_local(), labels.to_local()
    losses, lse_local = plain(x_local, labels_local, w_local, reduction="none", ignore_index=ignore_index)
    rows = (x.shape[0],)
    lse = DTensor.from_local(lse_local, mesh, [Shard(0)], run_check=False, shape=rows, stride=(1,))
    if reduction == "none":
        return DTensor.from_local(losses, mesh, [Shard(0)], run_check=False, shape=rows, stride=(1,)), lse
    valid = torch.ones_like(labels_local, dtype=torch.bool) if ignore_index is None else labels_local != ignore_index
    partial = DTensor.from_local(torch.stack([losses.sum(), valid.sum().to(losses.dtype)]), mesh, [Partial()],
                                 run_check=False)
    total, count = partial.redistribute(mesh, [Replicate()]).unbind(0)
    return (total if reduction == "sum" else total / count), lse


def loss(plain: Plain, x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, *, reduction: str,
         ignore_index: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`linear_softmax_cross_entropy_loss` (`plain`, on local tensors) where any input is a DTensor."""
    mesh, p = _mesh_and_placements(x, labels, w)
    if p["x"] == Replicate() and p["labels"] == Replicate() and p["w"] == Shard(1):
        return _vocabulary(x, labels, w, reduction, ignore_index, mesh)
    if p["x"] == Shard(0) and p["labels"] == Shard(0) and p["w"] == Replicate():
        return _rows(plain, x, labels, w, reduction, ignore_index, mesh)
    if all(v == Replicate() for v in p.values()):
        out, lse = plain(*(t.to_local() for t in (x, labels, w)), reduction=reduction, ignore_index=ignore_index)
        return (DTensor.from_local(out, mesh, [Replicate()], run_check=False),
                DTensor.from_local(lse, mesh, [Replicate()], run_check=False))
    given = ", ".join(f"{n} {describe([v])}" for n, v in p.items())
    raise refuse(OP, f"got {given}; it takes rows split (x and labels Shard(0), w Replicate()), the vocabulary "
                     "split (w Shard(1), x and labels Replicate()) or everything replicated: redistribute to one of "
                     "those (a hidden-size split of x and w would need the logits summed over ranks, which the "
                     "fused kernel never forms)")


def _replicated_only(op: str) -> Callable[..., list]:
    """A rule for one of the four custom ops (each with two outputs): replicated in, replicated out."""
    def rule(*args: object) -> list:
        tensors = {f"argument {i}": a for i, a in enumerate(args) if hasattr(a, "placements")}
        one_dim_mesh(op, tensors)
        split = {n: placement(s) for n, s in tensors.items() if placement(s) != Replicate()}
        if split:
            raise refuse(op, f"the custom op takes replicated DTensors only, got "
                             f"{', '.join(f'{n} {describe([p])}' for n, p in split.items())}; call "
                             f"tokamax.torch_ops.{OP}, which takes rows split (x Shard(0)) or the vocabulary split "
                             "(w Shard(1))")
        return [([Replicate(), Replicate()], [Replicate() if hasattr(a, "placements") else None for a in args])]
    return rule


def register() -> None:
    """The replicated-only rules of the four custom ops."""
    ops = {"linear_softmax_cross_entropy_loss": custom_ops.linear_softmax_cross_entropy_loss_op,
           "linear_softmax_cross_entropy_loss_bwd": custom_ops.linear_softmax_cross_entropy_loss_bwd_op,
           "linear_softmax_cross_entropy_rows": custom_ops.linear_softmax_cross_entropy_rows_op,
           "linear_softmax_cross_entropy_rows_bwd": custom_ops.linear_softmax_cross_entropy_rows_bwd_op}
    for name, op in ops.items():
        register_sharding(op._opoverload)(_replicated_only(name))
