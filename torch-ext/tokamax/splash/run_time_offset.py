"""Batched splash attention at a mask offset known only at run time: queries against a KV cache
whose fill level the export cannot see, so that one export serves every step.

The kernel is upstream's (`SplashAttentionKernel`, its blocks from upstream's Op's config choice);
its block schedule comes from `masks.runtime_schedule` (the queries' positions as upstream's
`q_sequence`, blocks classified in JAX) narrowed by the segment ids, as upstream's kernel narrows it
at run time, so only blocks holding a key some query sees are read: with a causal or local mask,
none past the last query's slot, none before a window. That schedule spans every (q block, KV
block) pair with int32 indices in SMEM, 17 bytes a pair, so a call whose pairs the chip's SMEM
cannot hold is refused before the kernel is traced (`schedule.check_smem`). The query heads that
share a KV head are folded into one kernel head (rows = heads per KV head x q_len), so each KV
block is read once per KV head, not once per query head. Sinks are per query head, so the kernel
runs without them and each row's sink enters exactly afterwards: out * Z / (Z + exp(sink)) = out *
sigmoid(lse - sink) from the kernel's logsumexp (upstream's kernel applies sinks per kernel head,
which would stop the heads from folding). Forward only.

The config is upstream's Op's choice for the call's key, an autotuning result's included, except the
diagonal skips (`qk_diag_skip`, `sv_diag_skip`): they mask every sub-tile above a partial block's own
diagonal, which holds only for a causal mask on block-aligned diagonals known when tracing (upstream
refuses them for any mask but its `CausalMask`). At a run-time offset the partial blocks lie anywhere,
so a config naming them (a result file, edited or merged: upstream's tuner does not name them for this
dense-mask key) runs without them, with a warning; its blocks and layouts apply.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from .. import hosts
from . import _upstream, blocks, operands, padding, schedule
from .lengths import padded
from .masks import MaskSpec, runtime_schedule


@dataclasses.dataclass(frozen=True)
class _Call:
    """A run-time-offset call, padded and folded: the kernel and its operands."""

    kernel: Any
    q: jax.Array  # [batch, kernel heads, rows (padded), head_dim]
    k: jax.Array
    v: jax.Array
    q_ids: jax.Array  # [batch, rows (padded)]
    kv_ids: jax.Array  # [batch, kv_len (padded)]
    rows: int
    block_kv: int
    row_sinks: jax.Array | None  # [kernel heads, rows]: each row's query head's sink


def _without_diagonal_skip(config: Any) -> Any:
    """`config` without the diagonal skips, which a run-time offset breaks (module docstring), saying so."""
    if not (config.qk_diag_skip or config.sv_diag_skip):
        return config
    warnings.warn("tokamax splash attend_at: the config chosen for this call (an autotuning result's) names "
                  "qk_diag_skip / sv_diag_skip, which assume a causal mask on block-aligned diagonals known when "
                  "tracing; at a run-time offset the masked keys lie elsewhere, so the call runs without them (the "
                  "config's blocks and layouts apply)", UserWarning, stacklevel=4)
    return dataclasses.replace(config, qk_diag_skip=False, sv_diag_skip=False)


def _prepare(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
             offset: jax.Array, sinks: jax.Array | None, spec: MaskSpec, soft_cap: float | None,
             op: str = "splash.attend_at") -> _Call:
    operands.check(op, q, k, v, q_ids, kv_ids, sinks, soft_cap=soft_cap, spec=spec)
    if operands.empty(op, q, k):
        raise ValueError(f"tokamax {op}: q must hold a query (a batch and q_len above 0), got shape {tuple(q.shape)}")
    if tuple(getattr(offset, "shape", ())) not in ((), (1,)):
        raise ValueError(f"tokamax {op}: offset must be one value (an int32 scalar), got shape {tuple(offset.shape)}")
    batch, heads, q_len, head_dim = q.shape
    if k.ndim == 3:  # multi-query: one KV head
        k, v = k[:, None], v[:, None]
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if q_ids is None:
        q_ids, kv_ids = jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, kv_len), jnp.int32)
    group = heads // kv_heads
    rows, rows_pad, kv_pad = group * q_len, padded(group * q_len), padded(kv_len)
    offset = jnp.asarray(offset, jnp.int32).reshape(())
    positions = offset + jnp.tile(jnp.arange(q_len, dtype=jnp.int32), group)
    positions = padding.pad(positions, 0, rows_pad, offset + q_len - 1)  # padded rows ask what the last query asks
    below = jnp.minimum(q_ids.min(), kv_ids.min()) - 1
    q_ids = jnp.tile(q_ids, (1, group))
    if rows_pad != rows:
        q_ids = jnp.concatenate([q_ids, jnp.broadcast_to(q_ids[:, -1:], (batch, rows_pad - rows))], axis=1)
    kv_ids = padding.pad(kv_ids, 1, kv_pad, below)
    q_p = padding.pad(q.reshape(batch, heads // group, rows, head_dim), 2, rows_pad)
    k_p, v_p = padding.pad(k, 2, kv_pad), padding.pad(v, 2, kv_pad)

    lib, base = _upstream.kernel(), _upstream.base()
    args = _upstream.op_arguments((q_ids[0], kv_ids[0]), None, False, soft_cap)
    stand_in = spec.stand_in((rows_pad, kv_pad), None)
    config = _without_diagonal_skip(
        _upstream.bind_as_public(_upstream.forward_op(), stand_in, q_p[0], k_p[0], v_p[0], **args).default_config)
    config = blocks.fitted_forward(config, rows_pad, kv_pad, head_dim, v.shape[-1], heads // group, k.shape[1],
                                   True)
    splash_config = dataclasses.replace(lib.SplashConfig.get_default(), attn_logits_soft_cap=soft_cap, dropout_rate=0.0,
                                        block_q_dkv=None, block_kv_dkv=None, block_kv_dkv_compute=None,
                                        **dataclasses.asdict(config))  # as upstream's Op builds it
    grid = (rows_pad // splash_config.block_q) * (kv_pad // splash_config.block_kv)
    schedule.check_smem("run-time-offset forward", schedule.refined_grid_bytes(grid),
                        f"{spec.kind} mask, {rows_pad} query rows x {kv_pad} KV slots in {splash_config.block_q} x "
                        f"{splash_config.block_kv} blocks: {grid:,} blocks x {schedule.REFINED_BYTES} B (every block, "
                        "segment ids)")
    if spec.kind == "full":  # the offset changes nothing: every block full, the ids say which keys count
        info = _upstream.mask_info().MaskInfo(None, None, None, None, None, None, None)
    else:
        info = runtime_schedule(spec, positions, kv_pad, splash_config.block_q, splash_config.block_kv)
    kernel = lib.SplashAttentionKernel(info, None, config=splash_config, is_mqa=False,
                                       save_residuals=sinks is not None, mask_value=base.DEFAULT_MASK_VALUE,
                                       mask_function=spec.function(), fwd_mask_sparsity=1.0, dkv_mask_sparsity=1.0)
    row_sinks = None if sinks is None else jnp.repeat(sinks.reshape(kv_heads, group), q_len, axis=1)
    return _Call(kernel, q_p, k_p, v_p, q_ids, kv_ids, rows, splash_config.block_kv, row_sinks)


@hosts.emulated("splash.attend_at")
def attend_at(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
              offset: jax.Array, sinks: jax.Array | None, *, spec: MaskSpec, soft_cap: float | None = None
              ) -> jax.Array:
    """out [batch, heads, q_len, head_dim_v] for queries at KV positions offset + i (`offset` an
    int32 scalar array). Shapes and ids as `fixed_offset.attend`; without ids every key counts."""
    call = _prepare(q, k, v, q_ids, kv_ids, offset, sinks, spec, soft_cap)
    base = _upstream.base()

    def one(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array, kv_ids: jax.Array) -> Any:
        return call.kernel(q, k, v, segment_ids=base.SegmentIds(q_ids, kv_ids))

    result = jax.vmap(one)(call.q, call.k, call.v, call.q_ids, call.kv_ids)
    if call.row_sinks is None:
        out = padding.cut(result, 2, call.rows)
    else:  # Z / (Z + exp(sink)) with Z = exp(lse)
        out, stats = result
        out, lse = padding.cut(out, 2, call.rows), padding.cut(stats["logsumexp"], 2, call.rows)
        out = (out * jax.nn.sigmoid(lse - call.row_sinks)[..., None]).astype(out.dtype)
    return out.reshape(*q.shape[:3], out.shape[-1])


def kv_slots_read(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
                  offset: jax.Array, sinks: jax.Array | None, *, spec: MaskSpec, soft_cap: float | None = None
                  ) -> jax.Array:
    """int32: the KV slots `attend_at` with these arguments reads per sequence, summed over its
    kernel heads (the KV heads): each scheduled (q block, KV block) pair reads one KV block, after
    upstream's kernel narrows the schedule by the segment ids."""
    call = _prepare(q, k, v, q_ids, kv_ids, offset, sinks, spec, soft_cap, "splash.kv_slots_read")
    lib, base = _upstream.kernel(), _upstream.base()
    config = call.kernel.kwargs["config"]

    def scheduled(q_ids: jax.Array, kv_ids: jax.Array) -> jax.Array:
        info, _, _ = lib._refine_mask_info_with_segments(
            call.kernel.fwd_mask_info, base.SegmentIds(q_ids, kv_ids), q_blocks=call.q.shape[2] // config.block_q,
            kv_blocks=call.k.shape[2] // config.block_kv, bq=config.block_q, bkv=config.block_kv, is_dkv=False)
        return info.num_active_blocks[0]

    blocks = jax.vmap(scheduled)(call.q_ids, call.kv_ids)[0]  # one schedule for the whole batch
    return blocks * call.block_kv * call.q.shape[1]
