"""Ring attention over a mesh: the per-chip scan (`steps`) inside a `jax.shard_map`, for the whole
batch; what JAX users call (`attention`, differentiable) and what the Torch ring op exports
(`forward`, `backward`: torch-tpu's `jax_op` only jits and exports a function, so the function holds
its own `shard_map`). The functions see global shapes (each chip's shard times its mesh axes), the
sequence laid out as `Layout.balanced` says (`layout.to_ring_layout`); each chip works on its shard.
No mask array is built on the host, for any length: each call's schedule is made in the graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from .. import checks, hosts
from ..splash import operands as splash_operands
from ..splash.masks import MaskSpec
from . import steps

BLOCK = 128  # the smallest splash block; each chip's shard (each head-tail chunk) a multiple of it
P = jax.sharding.PartitionSpec


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the tensors of one op lie on the mesh: the sequence over `axis` (the ring; each chip's slice
    contiguous, or head-tail with `balanced`), the batch and heads over the other mesh axes (or not
    sharded: None), K/V with a head axis or multi-query; the mask (causal or full, and within a window
    if given: `MaskSpec.of`, a causal window's right side clipped to 0)."""

    mesh: jax.sharding.Mesh
    axis: str
    batch_axis: str | None
    head_axis: str | None
    mqa: bool
    causal: bool
    balanced: bool = False
    window: tuple[int | None, int | None] | None = None

    @property
    def ring_size(self) -> int:
        return self.mesh.shape[self.axis]

    @property
    def spec(self) -> MaskSpec:
        return MaskSpec.of(self.causal, self.window)

    @property
    def plan(self) -> steps.Plan:
        return steps.Plan(self.spec, self.balanced, self.axis, self.mqa)

    @property
    def q(self) -> P:  # [batch, heads, len, head_dim]
        return P(self.batch_axis, self.head_axis, self.axis, None)

    @property
    def kv(self) -> P:  # [batch, kv_heads, len, head_dim] or [batch, len, head_dim]
        return P(self.batch_axis, self.axis, None) if self.mqa else self.q

    @property
    def rows(self) -> P:  # logsumexp [batch, heads, len]
        return P(self.batch_axis, self.head_axis, self.axis)

    @property
    def ids(self) -> P:  # segment ids [batch, len]
        return P(self.batch_axis, self.axis)


def check_operands(layout: Layout, q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> None:
    """q, k, v as splash's (`splash.operands`), K/V of the rank the layout's `mqa` says; segment ids int32
    [batch, len]."""
    op = "ring.attention"
    splash_operands.check(op, q, k, v)
    if segment_ids is not None:
        checks.shape(op, "segment_ids", segment_ids, (q.shape[0], q.shape[2]), "[batch, len]")
        checks.int32(op, "segment_ids", segment_ids)
    if k.ndim != (3 if layout.mqa else 4):
        want = "[batch, len, head_dim] (Layout(mqa=True))" if layout.mqa else "[batch, kv_heads, len, head_dim]"
        raise ValueError(f"tokamax {op}: k must be {want}, got shape {tuple(k.shape)}")
    checks.same(op, "the sequence length", q=q.shape[2], k=k.shape[-2])


def check_shard(layout: Layout, q: jax.Array) -> None:
    """Refuses, naming the op, a sequence whose per-chip shard (each head-tail chunk, load-balanced) is
    off the kernel's 128-token blocks: the block schedule is made per 128 tokens, and the kernel would
    not see the tail of the shard."""
    seq_len, ring = q.shape[2], layout.ring_size
    unit = BLOCK * (2 if layout.balanced else 1)
    if seq_len % (ring * unit):
        what = "its two head-tail chunks each a multiple of" if layout.balanced else "a multiple of"
        raise ValueError(f"tokamax ring attention: a sequence of {seq_len} tokens over a ring of {ring} leaves each "
                         f"chip {seq_len / ring:g} tokens; each chip's shard must be {what} {BLOCK}, the kernel's "
                         "smallest block: pad the sequence (segment ids mask the padding)")


def _ids(q: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """[batch, len] ids per chip: the given ones, or one segment (upstream's kernel compacts its schedule
    with them)."""
    return jnp.ones(q.shape[:1] + q.shape[2:3], jnp.int32) if segment_ids is None else segment_ids


def forward(layout: Layout) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """fn(q, k, v, segment_ids) -> (out, logsumexp), each chip's shards in and out."""
    plan = layout.plan

    @hosts.emulated("ring.forward", layout.mesh)
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        check_operands(layout, q, k, v, segment_ids)
        check_shard(layout, q)

        def body(q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None) -> tuple[jax.Array, jax.Array]:
            ids = _ids(q, ids)
            return jax.vmap(lambda q, k, v, i: steps.forward(plan, q, k, v, i, i))(q, k, v, ids)

        in_specs = (layout.q, layout.kv, layout.kv, None if segment_ids is None else layout.ids)
        return jax.shard_map(body, mesh=layout.mesh, in_specs=in_specs, out_specs=(layout.q, layout.rows),
                             check_vma=False)(q, k, v, segment_ids)

    return fn


def backward(layout: Layout) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """fn(q, k, v, segment_ids, out, logsumexp, dout) -> (dq, dk, dv): dK/dV travelling round the ring
    with K/V."""
    plan = layout.plan

    @hosts.emulated("ring.backward", layout.mesh)
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, out: jax.Array,
           lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        check_shard(layout, q)

        def body(q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None, out: jax.Array,
                 lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            ids = _ids(q, ids)
            dq, dk, dv = jax.vmap(lambda q, k, v, i, o, s, d: steps.backward(plan, q, k, v, i, i, o, s, d))(
                q, k, v, ids, out, lse, dout)
            if layout.mqa and layout.head_axis is not None:
                # multi-query K/V are whole on every head shard, and each shard's dK/dV sums its own heads
                dk, dv = jax.lax.psum((dk, dv), layout.head_axis)
            return dq, dk, dv

        in_specs = (layout.q, layout.kv, layout.kv, None if segment_ids is None else layout.ids, layout.q,
                    layout.rows, layout.q)
        return jax.shard_map(body, mesh=layout.mesh, in_specs=in_specs, out_specs=(layout.q, layout.kv, layout.kv),
                             check_vma=False)(q, k, v, segment_ids, out, lse, dout)

    return fn


def attention(layout: Layout) -> Callable[..., jax.Array]:
    """fn(q, k, v, segment_ids=None) -> out: `forward` with `backward` as its VJP (jax.grad takes it)."""
    fwd, bwd = forward(layout), backward(layout)

    @jax.custom_vjp
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
        return fwd(q, k, v, segment_ids)[0]

    def fn_fwd(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None) -> tuple:
        out, lse = fwd(q, k, v, segment_ids)
        return out, (q, k, v, segment_ids, out, lse)

    def fn_bwd(residuals: tuple, dout: jax.Array) -> tuple:
        q, k, v, segment_ids, out, lse = residuals
        dq, dk, dv = bwd(q, k, v, segment_ids, out, lse, dout)
        return dq, dk, dv, None

    fn.defvjp(fn_fwd, fn_bwd)
    return fn
