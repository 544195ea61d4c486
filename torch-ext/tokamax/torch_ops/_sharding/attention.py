"""DTensor sharding rules of the splash-attention custom ops (`splash_op`, its backward, `splash_at_op`,
`splash_cache_op`):
the kernel runs on each rank's shard unchanged when q is split over the batch (k, v, segment ids
with it) or over the heads (k and v over their key/value heads, so each rank keeps whole groups of
grouped-query attention; multi-query k and v, and segment ids, replicated; sinks split with the
heads); or everything replicated. No collective: the outputs (and in the backward the gradients)
stay split the same way, except for what every rank's heads or rows share, whose gradients are each
rank's partial sum (DTensor's Partial, reduced where the tensor's gradient is replicated): multi-query
k and v of a heads split, and the sinks of a batch split.

q decides: the other tensors are redistributed to match it (DTensor's own choice, e.g. a local
chunk of a replicated k). A q split over its sequence or head_dim, or a Partial q, is refused: a
query needs every key of its row, which this kernel only has on one rank.
"""

from __future__ import annotations

from torch.distributed.tensor.experimental import register_sharding

from ..splash_attention import cache_op, custom_ops
from .placements import Partial, Replicate, Shard, describe, one_dim_mesh, placement, refuse, shard_dim

__all__ = ["register"]

OP = "splash_attention"


def _layout(q: object, k: object) -> str:
    """"batch", "heads" or "replicated": q's split, checked."""
    one_dim_mesh(OP, {"q": q, "k": k})
    p = placement(q)
    dim = shard_dim(p, 4)
    if p == Replicate():
        return "replicated"
    if dim == 0:
        return "batch"
    if dim == 1:
        world, heads = q.mesh.size(), q.shape[1]
        kv_heads = k.shape[1] if len(k.shape) == 4 else None
        if heads % world or (kv_heads is not None and kv_heads % world):
            kv = "" if kv_heads is None else f" and k's {kv_heads} key/value heads"
            raise refuse(OP, f"q is split over its heads (Shard(1)) on {world} ranks, but q's {heads} heads{kv} do "
                             f"not divide by {world}: split over the batch (Shard(0)) instead, or use a mesh whose "
                             "size divides the key/value heads")
        return "heads"
    what = {2: "its sequence (Shard(2))", 3: "head_dim (Shard(3))"}.get(dim, describe([p]))
    raise refuse(OP, f"q is split over {what}; the kernel needs every key of a query's row on one rank, so it "
                     "takes q split over the batch (Shard(0)) or the heads (Shard(1)), or replicated: redistribute "
                     "q (and k, v) to one of those (a sequence split needs ring attention, which passes keys "
                     "between ranks)")


def _inputs(layout: str, k: object, q_ids: object, kv_ids: object, sinks: object) -> list:
    """Placements of (q, k, v, q_ids, kv_ids) and of sinks."""
    if layout == "replicated":
        tensor = ids = sink = Replicate()
        kv = Replicate()
    elif layout == "batch":
        tensor = kv = ids = Shard(0)
        sink = Replicate()
    else:
        tensor, ids, sink = Shard(1), Replicate(), Shard(0)
        kv = Shard(1) if len(k.shape) == 4 else Replicate()
    return [tensor, kv, kv, None if q_ids is None else ids, None if kv_ids is None else ids,
            None if sinks is None else sink]


def _outputs(layout: str) -> tuple:
    """Placements of out and of the per-row logsumexp ([batch, heads, 0] empties without residuals, which split
    over dims 0 and 1 as well)."""
    split = {"replicated": Replicate(), "batch": Shard(0), "heads": Shard(1)}[layout]
    return split, split


def _splash(q: object, k: object, v: object, q_ids: object, kv_ids: object, sinks: object, *statics: object) -> list:
    layout = _layout(q, k)
    out, stats = _outputs(layout)
    return [([out, stats], _inputs(layout, k, q_ids, kv_ids, sinks) + [None] * len(statics))]


def _splash_bwd(q: object, k: object, v: object, q_ids: object, kv_ids: object, sinks: object, out: object,
                lse: object, grad: object, *statics: object) -> list:
    layout = _layout(q, k)
    o, stats = _outputs(layout)
    inputs = _inputs(layout, k, q_ids, kv_ids, sinks)
    # multi-query k and v are every rank's whole tensors under a heads split, but each rank's dk and dv
    # cover only its own query heads
    d_kv = Partial() if layout == "heads" and len(k.shape) == 3 else inputs[1]
    if sinks is None:
        d_sinks = Replicate()  # zeros [1] on every rank
    else:
        d_sinks = {"replicated": Replicate(), "batch": Partial(), "heads": Shard(0)}[layout]
    return [([inputs[0], d_kv, d_kv, d_sinks], inputs + [o, stats, o] + [None] * len(statics))]


def _splash_at(q: object, k: object, v: object, q_ids: object, kv_ids: object, q_offset: object, sinks: object,
               *statics: object) -> list:
    layout = _layout(q, k)
    out, _ = _outputs(layout)
    inputs = _inputs(layout, k, q_ids, kv_ids, sinks)
    return [([out], inputs[:5] + [Replicate(), inputs[5]] + [None] * len(statics))]


def _splash_cache(q: object, k: object, v: object, mask: object, first_position: object, lengths: object,
                  sinks: object, *statics: object) -> list:
    """The cache op: its padding mask is split as segment ids are; the first position and lengths replicated."""
    layout = _layout(q, k)
    out, _ = _outputs(layout)
    inputs = _inputs(layout, k, mask, mask, sinks)
    return [([out], inputs[:4] + [Replicate(), Replicate(), inputs[5]] + [None] * len(statics))]


def register() -> None:
    """Registers the four ops' rules with DTensor."""
    register_sharding(custom_ops.splash_op._opoverload)(_splash)
    register_sharding(custom_ops.splash_bwd_op._opoverload)(_splash_bwd)
    register_sharding(custom_ops.splash_at_op._opoverload)(_splash_at)
    register_sharding(cache_op.splash_cache_op._opoverload)(_splash_cache)
