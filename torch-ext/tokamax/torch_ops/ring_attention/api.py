"""`ring_attention`, what users call on this rank's sequence shard, and `ring_attention_ops`, which
makes the ops for a mesh ahead of `torch.compile`: argument and mesh checks, each failure naming
the argument."""

from __future__ import annotations

import jax
import numpy as np
import torch

from ...ring import layout as ring_layout
from ...ring import sharded
from .. import _checks
from .custom_ops import OP, RingOps, ops_for


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _check_mesh(mesh: jax.sharding.Mesh) -> None:
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"tokamax {OP}: mesh must be a jax.sharding.Mesh (on a TPU host: "
                        f"torch.tpu.pallas.get_pallas_mesh), got {type(mesh).__name__}")


def mesh_coordinate(mesh: jax.sharding.Mesh, axis_name: str = "sp", rank: int | None = None) -> int:
    """Which shard along `axis_name` rank `rank` (default: this process's) passes: the coordinate on that
    axis of its chip's place in `mesh`. torch-tpu runs rank r on the mesh's device whose process_index is
    r (`get_pallas_mesh` puts it at position r, row-major), so on a mesh of several axes r is not the
    shard: on `get_pallas_mesh(("dp", "sp"), (2, 4))` rank 5 passes sequence shard 1 (`"sp"`) of batch
    shard 1 (`"dp"`), on `(("sp", "dp"), (4, 2))` sequence shard 2 of batch shard 1."""
    _check_mesh(mesh)
    if axis_name not in mesh.axis_names:
        raise ValueError(f"tokamax {OP}: axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    if rank is None:
        dist = torch.distributed
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or rank < 0:
        raise ValueError(f"tokamax {OP}: rank must be an int >= 0, got {rank!r}")
    places = [i for i, device in enumerate(mesh.devices.flat) if getattr(device, "process_index", None) == rank]
    if len(places) != 1:
        raise ValueError(f"tokamax {OP}: rank {rank} runs {len(places)} of the mesh's devices (by their "
                         "process_index), not one; torch-tpu runs one process per chip: pass the mesh "
                         "torch.tpu.pallas.get_pallas_mesh builds")
    return int(np.unravel_index(places[0], mesh.devices.shape)[mesh.axis_names.index(axis_name)])


def _layout(mesh: jax.sharding.Mesh, axis_name: str, batch_axis: str | None, head_axis: str | None, mqa: bool,
            causal: bool, load_balanced: bool = False, window: tuple[int | None, int | None] | None = None
            ) -> sharded.Layout:
    """The mesh's layout, checked: a Mesh, each named axis in it once, every axis of it named."""
    _check_mesh(mesh)
    named = {"axis_name": axis_name, "batch_axis": batch_axis, "head_axis": head_axis}
    for name, axis in named.items():
        if axis is not None and axis not in mesh.axis_names:
            raise ValueError(f"tokamax {OP}: {name} {axis!r} is not an axis of the mesh {mesh.axis_names}")
    used = [axis for axis in named.values() if axis is not None]
    if len(set(used)) != len(used):
        raise ValueError(f"tokamax {OP}: axis_name, batch_axis and head_axis must be different axes, got "
                         f"{axis_name!r}, {batch_axis!r}, {head_axis!r}")
    unused = [axis for axis in mesh.axis_names if axis not in used and mesh.shape[axis] > 1]
    if unused:
        raise ValueError(f"tokamax {OP}: the mesh's axes {unused} shard nothing; every rank holds a different "
                         "shard, so name each axis of more than one chip as axis_name (the sequence), batch_axis "
                         "or head_axis")
    if window is not None:
        if not isinstance(window, tuple) or len(window) != 2 or not any(w is not None for w in window) or any(
                w is not None and (not isinstance(w, int) or w < 0) for w in window):
            raise ValueError(f"tokamax {OP}: window must be (left, right), each an int >= 0 or None and not both "
                             f"None, got {window!r}")
    if load_balanced and not causal and window is None:
        raise ValueError(f"tokamax {OP}: load_balanced reorders a causal (or windowed) ring; a full mask is balanced "
                         "as it is: leave load_balanced off")
    return sharded.Layout(mesh, axis_name, batch_axis, head_axis, mqa, bool(causal), bool(load_balanced), window)


def ring_attention_ops(mesh: jax.sharding.Mesh, *, axis_name: str = "sp", causal: bool = True, mqa: bool = False,
                       batch_axis: str | None = None, head_axis: str | None = None, load_balanced: bool = False,
                       window: tuple[int | None, int | None] | None = None) -> RingOps:
    """The forward and backward custom ops `ring_attention` runs for this mesh and these options (`mqa`:
    k and v without a head axis), made now: call it before `torch.compile`, which cannot register ops."""
    return ops_for(_layout(mesh, axis_name, batch_axis, head_axis, mqa, causal, load_balanced, window))


def _check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor | None,
                   load_balanced: bool = False) -> bool:
    """q, k, v (and the segment ids) agree; returns whether k and v are multi-query."""
    _checks.tensors(OP, ("segment_ids",), q=q, k=k, v=v, segment_ids=segment_ids)
    _checks.floats(OP, q=q, k=k, v=v)
    _checks.rank(OP, "q", q, (4,), "[batch, heads, local_len, head_dim] (this rank's sequence shard)")
    _checks.rank(OP, "k", k, (3, 4), "[batch, kv_heads, local_len, head_dim] or [batch, local_len, head_dim]")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"tokamax {OP}: v must match k's shape {tuple(k.shape[:-1])} but for head_dim, "
                         f"got {tuple(v.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"tokamax {OP}: k's batch {k.shape[0]} differs from q's {q.shape[0]}")
    if k.shape[-2] != q.shape[2]:
        raise ValueError(f"tokamax {OP}: k's local_len {k.shape[-2]} differs from q's {q.shape[2]}; ring attention "
                         "is self-attention over one sequence, sharded alike on every rank")
    heads, kv_heads = q.shape[1], k.shape[1] if k.dim() == 4 else 1
    if heads % kv_heads:
        raise ValueError(f"tokamax {OP}: q's {heads} heads must be a multiple of k's {kv_heads}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"tokamax {OP}: head_dim differs: q {q.shape[-1]}, k {k.shape[-1]}")
    unit = sharded.BLOCK * (2 if load_balanced else 1)
    if q.shape[2] % unit:
        what = "its two head-tail chunks each a multiple of" if load_balanced else "a multiple of"
        raise ValueError(f"tokamax {OP}: this rank's sequence shard (q's local_len {q.shape[2]}) must be {what} "
                         f"{sharded.BLOCK}, the kernel's smallest block; pad the sequence (segment ids mask padding)")
    if segment_ids is not None:
        _checks.dtype(OP, "segment_ids", segment_ids, (torch.int32,))
        _checks.shape(OP, "segment_ids", segment_ids, (q.shape[0], q.shape[2]), "[batch, local_len]")
    return k.dim() == 3


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mesh: jax.sharding.Mesh,
                   axis_name: str = "sp", causal: bool = True, segment_ids: torch.Tensor | None = None,
                   batch_axis: str | None = None, head_axis: str | None = None, load_balanced: bool = False,
                   window: tuple[int | None, int | None] | None = None) -> torch.Tensor:
    """Ring attention (sequence parallel; upstream's splash kernels per ring step, `tokamax.ring`),
    softmax(q k^T, masked) v, no scaling.

    Each rank passes its shard of the sequence: q [batch, heads, local_len, head_dim], k, v [batch,
    kv_heads, local_len, head_dim] (kv_heads dividing heads) or [batch, local_len, head_dim] (multi-query);
    K/V shards travel round the ring (with their positions), and each rank gets its queries' output
    [batch, heads, local_len, head_dim]. The rank at coordinate c of `axis_name` (`mesh_coordinate(mesh,
    axis_name)`: its rank only on a mesh of that one axis) holds positions [c * local_len, (c + 1) *
    local_len) (local_len a multiple of 128), or, with `load_balanced`, the head-tail layout: chunks c and
    2 N - 1 - c of local_len / 2 tokens (each a multiple of 128), so that every rank computes the same
    number of causal blocks at every step; `to_ring_layout` / `from_ring_layout` put a whole sequence
    into that layout and outputs back. `mesh` spans every rank (torch-tpu's `get_pallas_mesh`); its other
    axes shard the batch (`batch_axis`) or the heads (`head_axis`), each rank passing the shard of its
    coordinate there. Causal over the whole sequence (default) or full; a local `window` (left, right) of
    positions within it (causal: keys in [p - left, p], the right side clipped to 0; a two-sided window
    needs causal=False); `segment_ids` (int32 [batch, local_len], this rank's shard) keep attention
    within equal ids. No mask array is built, for any length. Differentiable in q, k and v. The ops are
    made per mesh and options on first use: make them before `torch.compile` with `ring_attention_ops`.
    """
    mqa = _check_tensors(q, k, v, segment_ids, load_balanced)
    layout = _layout(mesh, axis_name, batch_axis, head_axis, mqa, causal, load_balanced, window)
    world = _world_size()
    if mesh.size != world:
        raise ValueError(f"tokamax {OP}: the mesh holds {mesh.size} chips but the job's world size is {world}; "
                         "torch-tpu runs one process per chip and the mesh must span them all")
    if q.device.type == "cpu" and mesh.size > 1:
        raise NotImplementedError(f"tokamax {OP}: CPU tensors run a ring of one chip only (a mesh of size 1); "
                                  "across chips the K/V shards travel through torch-tpu's collectives, which only "
                                  "TPU tensors have")
    ops = ops_for(layout)
    ids = None if segment_ids is None else segment_ids.contiguous()
    out, _ = ops.forward(q.contiguous(), k.contiguous(), v.contiguous(), ids)
    return out


def to_ring_layout(x: torch.Tensor, ring_size: int, dim: int = -1, load_balanced: bool = True) -> torch.Tensor:
    """A whole sequence (tokens, position ids, shifted labels, segment ids, q/k/v, ...) along `dim`, laid
    out for a ring of `ring_size` ranks (`load_balanced`: head-tail; else as it is); a rank's shard is then
    `.chunk(ring_size, dim)[mesh_coordinate(mesh, axis_name)]` (its coordinate on the ring's axis, which is
    its rank only on a mesh of that one axis). Shift labels before: a mean or sum loss over the laid-out
    tokens is the same loss."""
    order = ring_layout.order(x.shape[dim], ring_size, load_balanced)
    return x.index_select(dim, torch.as_tensor(order, device=x.device))


def from_ring_layout(x: torch.Tensor, ring_size: int, dim: int = -1, load_balanced: bool = True) -> torch.Tensor:
    """The inverse of `to_ring_layout` (outputs gathered from the ranks, back in sequence order)."""
    inverse = ring_layout.inverse(x.shape[dim], ring_size, load_balanced)
    return x.index_select(dim, torch.as_tensor(inverse, device=x.device))
