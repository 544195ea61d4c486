"""The JAX side of the Torch ring attention: upstream's ring kernel (its custom VJP's forward and
backward rules, so the backward pass reuses the forward's logsumexp instead of running the ring twice)
inside a `jax.shard_map` over the mesh the op is made for, one kernel call per ring step for the batch.

torch-tpu's `jax_op` only jits and exports the function, so the function holds its own `shard_map`;
it sees global shapes (each rank's shard times its mesh axes) and each chip works on its shard.
Upstream's ring takes a dense mask (`make_ring_attention` refuses lazy ones), built on the host from
the global sequence length when the op is traced, once per length.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax

BLOCK = 128  # upstream's default splash blocks, which the ring runs with; each shard a multiple of it
P = jax.sharding.PartitionSpec


@functools.cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f"..._ported.{name}", __package__)


def ring() -> ModuleType:
    """Upstream's `ring_attention_kernel` (make_ring_attention, its custom VJP's rules)."""
    return _module("ring_attention").kernel


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the tensors of one op lie on the mesh: the sequence over `axis` (the ring), the batch and
    heads over the other mesh axes (or not sharded: None), K/V with a head axis or multi-query."""

    mesh: jax.sharding.Mesh
    axis: str
    batch_axis: str | None
    head_axis: str | None
    mqa: bool
    causal: bool

    @property
    def ring_size(self) -> int:
        return self.mesh.shape[self.axis]

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


@functools.lru_cache(maxsize=8)
def ring_kernel(seq: int, causal: bool, mqa: bool, axis: str, ring_size: int) -> Any:
    """Upstream's RingSplashAttentionKernel for a global sequence of `seq` (its mask info on the host),
    with upstream's default blocks and natural-base exponentials: upstream's ring merges the steps'
    softmax statistics in base e, and its own ring test turns base 2 off for that reason."""
    masks = _module("_src.ops.experimental.tpu.splash_attention.splash_attention_mask")
    splash = _module("_src.ops.experimental.tpu.splash_attention.splash_attention_kernel")
    mask = masks.make_causal_mask((seq, seq)) if causal else masks.FullMask((seq, seq))
    config = dataclasses.replace(splash.SplashConfig.get_default(), use_base2_exp=False)
    with jax.ensure_compile_time_eval():  # concrete mask info, never a trace's tracers, in the cache
        return ring().make_ring_attention(mask, config=config, is_mqa=mqa, ring_axis=axis, q_seq_shards=ring_size,
                                          kv_seq_shards=ring_size)


def _kernel_for(layout: Layout, q: jax.Array) -> Any:
    return ring_kernel(q.shape[2], layout.causal, layout.mqa, layout.axis, layout.ring_size)


def _segments(ids: jax.Array | None) -> Any:
    return None if ids is None else ring().SegmentIds(ids, ids)


def forward(layout: Layout) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """fn(q, k, v, segment_ids) -> (out, logsumexp), each chip's shards in and out."""

    def fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None
           ) -> tuple[jax.Array, jax.Array]:
        kernel = _kernel_for(layout, q)

        def body(kernel: Any, q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None
                 ) -> tuple[jax.Array, jax.Array]:
            def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None) -> tuple[jax.Array, jax.Array]:
                out, residuals = ring()._ring_attention_fwd(
                    kernel.fwd_mask_info, kernel.dkv_mask_info, q, k, v, _segments(ids), None, **kernel.kwargs,
                    ring_axis=layout.axis)
                _, _, _, _, _, _, lse, _, _ = residuals
                return out, lse

            return jax.vmap(one, in_axes=(0, 0, 0, None if ids is None else 0))(q, k, v, ids)

        in_specs = (kernel.manual_sharding_spec(), layout.q, layout.kv, layout.kv,
                    None if segment_ids is None else layout.ids)
        return jax.shard_map(body, mesh=layout.mesh, in_specs=in_specs, out_specs=(layout.q, layout.rows),
                             check_vma=False)(kernel, q, k, v, segment_ids)

    return fn


def backward(layout: Layout) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """fn(q, k, v, segment_ids, out, logsumexp, dout) -> (dq, dk, dv): upstream's ring backward rule,
    dK/dV travelling round the ring with K/V."""

    def fn(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, out: jax.Array,
           lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        kernel = _kernel_for(layout, q)
        kw = kernel.kwargs

        def body(kernel: Any, q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None, out: jax.Array,
                 lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: jax.Array | None, out: jax.Array,
                    lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
                residuals = (q, k, v, _segments(ids), None, out, lse, kernel.dkv_mask_info, None)
                _, _, dq, dk, dv, _, _ = ring()._ring_attention_bwd(
                    kw["mask_value"], kw["is_mqa"], kw["config"], kw["mask_function"], kw["fwd_mask_sparsity"],
                    kw["dkv_mask_sparsity"], kw["save_residuals"], layout.axis, residuals, dout)
                return dq, dk, dv

            axes = (0, 0, 0, None if ids is None else 0, 0, 0, 0)
            dq, dk, dv = jax.vmap(one, in_axes=axes)(q, k, v, ids, out, lse, dout)
            if layout.mqa and layout.head_axis is not None:
                # multi-query K/V are whole on every head shard, and each shard's dK/dV sums its own heads
                dk, dv = jax.lax.psum((dk, dv), layout.head_axis)
            return dq, dk, dv

        in_specs = (kernel.manual_sharding_spec(), layout.q, layout.kv, layout.kv,
                    None if segment_ids is None else layout.ids, layout.q, layout.rows, layout.q)
        return jax.shard_map(body, mesh=layout.mesh, in_specs=in_specs, out_specs=(layout.q, layout.kv, layout.kv),
                             check_vma=False)(kernel, q, k, v, segment_ids, out, lse, dout)

    return fn
