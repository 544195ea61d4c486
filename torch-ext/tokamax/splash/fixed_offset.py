"""Batched splash attention at a mask offset fixed when tracing: upstream's splash kernel, forward and
backward, with upstream's Mosaic splash Op's and VJP Op's config choice and the steps their `_fwd`
take, one kernel call (`jax.vmap`) for the whole batch, any length (`padding`).

The block schedule comes from `schedule` (built from the blocks' positions, O(blocks + entries) host
work, bit-identical to what upstream's `_process_mask` makes of the lazy mask; checked against the
chip's SMEM first), and the kernel is upstream's `SplashAttentionKernel` built from it as upstream's
`make_splash_mha` builds it; the backward runs upstream's `_splash_attention_bwd` on the residuals,
as upstream's VJP Op does. `attend` is differentiable (`jax.grad`, `jax.vjp`): a custom VJP whose
backward is `attend_vjp` on its residuals (upstream's kernel-level VJP would ask for backward blocks
the kernel is built without). Nothing of upstream's is patched: its public ops run upstream's own mask
processing unchanged.

Shapes: q [batch, heads, q_len, head_dim]; k, v [batch, kv_heads, kv_len, head_dim] (kv_heads
dividing heads: grouped-query attention) or [batch, kv_len, head_dim] (multi-query); segment ids
int32 [batch, q_len] and [batch, kv_len] (a query sees only keys of its own id); sinks float32
[heads]. No scaling: scale q first. Without segment ids and with lengths the blocks divide, the call
is upstream's kernel-level call exactly (`tests/jax/splash` compares the whole modules).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import hosts
from . import _upstream, blocks, operands, padding
from .blocks import Blocks
from .lengths import padded
from .masks import MaskSpec
from .schedule import Schedule


def _splash_config(config: Any, soft_cap: float | None, **blocks: Any) -> Any:
    """Upstream's SplashConfig from an Op's config, as its Ops' `_fwd` build it."""
    return dataclasses.replace(_upstream.kernel().SplashConfig.get_default(), attn_logits_soft_cap=soft_cap,
                               dropout_rate=0.0, **blocks, **dataclasses.asdict(config))


def _check_diagonal_skip(splash_config: Any, spec: MaskSpec, offset: int) -> None:
    """The diagonal skips assume every key past a query's position is masked, on block-aligned diagonals:
    a causal mask at an offset that is a multiple of the block (upstream checks the mask is causal)."""
    if not (splash_config.qk_diag_skip or splash_config.sv_diag_skip):
        return
    if spec.kind != "causal" or offset < 0 or offset % splash_config.block_q:
        raise ValueError(f"qk_diag_skip / sv_diag_skip need a causal mask at an offset that is a multiple of the "
                         f"{splash_config.block_q}-token block; got {spec} at offset {offset}")


def _schedule(spec: MaskSpec, shape: tuple[int, int], offset: int, blocks: tuple[int, int], *, is_dkv: bool,
              dynamic: bool, segments: bool, kernel: str) -> tuple[Any, Any, float]:
    """(MaskInfo of fresh jnp arrays, mask function, sparsity) of one kernel call, after the SMEM check."""
    schedule = Schedule.of(spec, shape, offset, blocks, is_dkv=is_dkv, dynamic=dynamic)
    schedule.check_smem(kernel, segments)
    info, mask_function = schedule.mask_info()
    sparsity = float(np.mean(info.block_mask != 0))  # upstream's formula (1.0 without a schedule)
    return jax.tree_util.tree_map(jnp.array, info), mask_function, sparsity


def _forward(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
             sinks: jax.Array | None, spec: MaskSpec, offset: int, soft_cap: float | None,
             forward_blocks: Blocks | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`attend`'s forward: upstream's kernel with residuals."""
    batch, _, q_len, _ = q.shape
    kv_len, mqa = k.shape[-2], k.ndim == 3
    ids = padding.segments(q_ids, kv_ids, batch, q_len, kv_len)
    q_p = padding.pad(q, 2, padded(q_len))
    k_p, v_p = padding.pad(k, -2, padded(kv_len)), padding.pad(v, -2, padded(kv_len))
    shape = (q_p.shape[2], k_p.shape[-2])
    stand_in = spec.stand_in(shape, offset)
    op, lib, base = _upstream.forward_op(), _upstream.kernel(), _upstream.base()

    def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: Any) -> tuple[jax.Array, ...]:
        args = _upstream.op_arguments(ids, sinks, mqa, soft_cap)
        config = _upstream.bind_as_public(op, stand_in, q, k, v, **args, return_residuals=True).default_config
        config = blocks.fitted_forward(config, shape[0], shape[1], q.shape[-1], v.shape[-1], q.shape[0],
                                       1 if mqa else k.shape[0], ids is not None, forward_blocks)
        splash_config = _splash_config(config, soft_cap, block_q_dkv=None, block_kv_dkv=None,
                                       block_kv_dkv_compute=None)
        _check_diagonal_skip(splash_config, spec, offset)
        info, mask_function, sparsity = _schedule(spec, shape, offset, (splash_config.block_q, splash_config.block_kv),
                                                  is_dkv=False, dynamic=True, segments=ids is not None,
                                                  kernel="forward")
        kernel = lib.SplashAttentionKernel(info, None, config=splash_config, is_mqa=mqa, save_residuals=True,
                                           mask_value=base.DEFAULT_MASK_VALUE, mask_function=mask_function,
                                           fwd_mask_sparsity=sparsity, dkv_mask_sparsity=1.0)
        out, stats = kernel(q, k, v, segment_ids=args["segment_ids"], sinks=sinks, prng_key=None)
        return out, stats["max_logits"], stats["logsumexp"]

    out, max_logits, lse = jax.vmap(one, in_axes=(0, 0, 0, None if ids is None else 0))(q_p, k_p, v_p, ids)
    return padding.cut(out, 2, q_len), padding.cut(max_logits, 2, q_len), padding.cut(lse, 2, q_len)


@hosts.emulated("splash.attend_vjp")
def attend_vjp(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
               sinks: jax.Array | None, out: jax.Array, max_logits: jax.Array, lse: jax.Array, dout: jax.Array, *,
               spec: MaskSpec, offset: int = 0, soft_cap: float | None = None, backward_blocks: Blocks | None = None
               ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """(dq, dk, dv, dsinks or None) of `attend` from its residuals. Padded query rows carry no
    cotangent and a logsumexp of +inf (so exp(logit - lse) = 0 there): they add nothing. `backward_blocks`: the
    fused backward's (block_q_dkv, block_kv_dkv, block_kv_dkv_compute), None for the package's choice
    (`blocks.fitted_backward`: upstream's where their VMEM fits the chip)."""
    operands.check("splash.attend_vjp", q, k, v, q_ids, kv_ids, sinks, soft_cap=soft_cap, spec=spec)
    operands.offset("splash.attend_vjp", offset)
    batch, _, q_len, _ = q.shape
    kv_len, mqa = k.shape[-2], k.ndim == 3
    ids = padding.segments(q_ids, kv_ids, batch, q_len, kv_len)
    q_pad = padded(q_len)
    q_p, out_p, dout_p = (padding.pad(x, 2, q_pad) for x in (q, out, dout.astype(out.dtype)))
    max_p, lse_p = padding.pad(max_logits, 2, q_pad), padding.pad(lse, 2, q_pad, jnp.inf)
    k_p, v_p = padding.pad(k, -2, padded(kv_len)), padding.pad(v, -2, padded(kv_len))
    shape = (q_pad, k_p.shape[-2])
    stand_in = spec.stand_in(shape, offset)
    op, lib, base = _upstream.vjp_op(), _upstream.kernel(), _upstream.base()

    def one(q: jax.Array, k: jax.Array, v: jax.Array, ids: Any, out: jax.Array, max_logits: jax.Array,
            lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, ...]:
        args = _upstream.op_arguments(ids, sinks, mqa, soft_cap)
        config = op.bind((max_logits, lse), out, dout, q, k, v, mask=stand_in, **args).default_config
        config = blocks.fitted_backward(config, shape[0], shape[1], q.shape[-1], v.shape[-1], q.shape[0],
                                        1 if mqa else k.shape[0], ids is not None, backward_blocks)
        if config.use_base2_exp:  # the kernel's statistics are in base 2
            lse = lse * lib.LOG2E
        splash_config = _splash_config(config, soft_cap, block_q=config.block_q_dkv, block_kv=config.block_kv_dkv,
                                       block_kv_compute=config.block_kv_dkv_compute)
        _check_diagonal_skip(splash_config, spec, offset)
        dkv_blocks = (splash_config.block_q_dkv, splash_config.block_kv_dkv)
        info, mask_function, sparsity = _schedule(spec, shape, offset, dkv_blocks, is_dkv=True,
                                                  dynamic=splash_config.dq_reduction_steps == 3,
                                                  segments=ids is not None, kernel="dK/dV backward")
        # upstream's VJP Op also builds the forward schedule at these blocks; only its sparsity reaches
        # the backward, which ignores it
        fwd_sparsity = Schedule.of(spec, shape, offset, (splash_config.block_q, splash_config.block_kv),
                                   is_dkv=False).sparsity()
        residuals = (q, k, v, args["segment_ids"], sinks, out, lse, info, None)
        _, _, dq, dk, dv, _, dsinks, _, _ = lib._splash_attention_bwd(
            save_residuals=False, mask_value=base.DEFAULT_MASK_VALUE, is_mqa=mqa, config=splash_config,
            mask_function=mask_function, fwd_mask_sparsity=fwd_sparsity, dkv_mask_sparsity=sparsity,
            res=residuals, grads=dout)
        return dq, dk, dv, dsinks

    dq, dk, dv, dsinks = jax.vmap(one, in_axes=(0, 0, 0, None if ids is None else 0, 0, 0, 0, 0))(
        q_p, k_p, v_p, ids, out_p, max_p, lse_p, dout_p)
    dq, dk, dv = padding.cut(dq, 2, q_len), padding.cut(dk, -2, kv_len), padding.cut(dv, -2, kv_len)
    return dq, dk, dv, None if dsinks is None else dsinks.sum(0)


def _primal(x: Any) -> Any:
    return x.value if isinstance(x, jax.custom_derivatives.CustomVJPPrimal) else x


def _is_zero(x: Any) -> bool:
    return isinstance(x, jax.custom_derivatives.SymbolicZero)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9))
def _differentiable(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
                    sinks: jax.Array | None, spec: MaskSpec, offset: int, soft_cap: float | None,
                    chosen: tuple[Blocks | None, Blocks | None]) -> tuple[jax.Array, jax.Array, jax.Array]:
    return _forward(q, k, v, q_ids, kv_ids, sinks, spec, offset, soft_cap, chosen[0])


def _differentiable_fwd(q: Any, k: Any, v: Any, q_ids: Any, kv_ids: Any, sinks: Any, spec: MaskSpec, offset: int,
                        soft_cap: float | None, chosen: tuple[Blocks | None, Blocks | None]) -> tuple[tuple, tuple]:
    operands = tuple(jax.tree_util.tree_map(_primal, x) for x in (q, k, v, q_ids, kv_ids, sinks))
    result = _forward(*operands, spec, offset, soft_cap, chosen[0])
    return result, (*operands, *result)


@hosts.emulated("splash.attend")
def _differentiable_bwd(spec: MaskSpec, offset: int, soft_cap: float | None,
                        chosen: tuple[Blocks | None, Blocks | None], residuals: tuple, cotangents: tuple) -> tuple:
    q, k, v, q_ids, kv_ids, sinks, out, max_logits, lse = residuals
    dout, d_max_logits, d_lse = cotangents
    taken = [name for name, d in (("max_logits", d_max_logits), ("logsumexp", d_lse)) if not _is_zero(d)]
    if taken:
        raise ValueError(f"tokamax splash.attend: a gradient through {' and '.join(taken)} was asked for, but "
                         "max_logits and logsumexp are the backward's residuals: upstream's backward "
                         "(splash.attend_vjp) takes a cotangent for out only (upstream's kernel VJP would drop "
                         "theirs silently); differentiate a loss of out, or pass your own cotangents to "
                         "splash.attend_vjp")
    if _is_zero(dout):
        return None, None, None, None, None, None
    dq, dk, dv, dsinks = attend_vjp(q, k, v, q_ids, kv_ids, sinks, out, max_logits, lse, dout, spec=spec,
                                    offset=offset, soft_cap=soft_cap, backward_blocks=chosen[1])
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None,
            None if sinks is None else dsinks.astype(sinks.dtype))


_differentiable.defvjp(_differentiable_fwd, _differentiable_bwd, symbolic_zeros=True)


@hosts.emulated("splash.attend")
def attend(q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None,
           sinks: jax.Array | None, *, spec: MaskSpec, offset: int = 0, soft_cap: float | None = None,
           forward_blocks: Blocks | None = None, backward_blocks: Blocks | None = None
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(out [batch, heads, q_len, head_dim_v], max_logits and logsumexp [batch, heads, q_len]) with
    the lazy mask `spec`, query i at KV position offset + i. Differentiable in q, k, v and the sinks
    through `out` (`jax.grad`, `jax.vjp`): the backward is `attend_vjp` on these residuals; a gradient
    through max_logits or logsumexp is refused (upstream's backward takes no cotangent for them).
    `forward_blocks`, `backward_blocks`: each kernel's blocks (`blocks.Blocks`), None for the package's choice
    (upstream's config choice where its VMEM fits the chip's scoped limit, else `blocks.choose`'s); blocks asked
    for that do not fit are refused. No query (a zero batch or q_len): empty results, zero gradients."""
    operands.check("splash.attend", q, k, v, q_ids, kv_ids, sinks, soft_cap=soft_cap, spec=spec)
    operands.offset("splash.attend", offset)
    if operands.empty("splash.attend", q, k):
        rows = q.shape[:3]
        return jnp.zeros((*rows, v.shape[-1]), q.dtype), jnp.zeros(rows, jnp.float32), jnp.zeros(rows, jnp.float32)
    return _differentiable(q, k, v, q_ids, kv_ids, sinks, spec, offset, soft_cap, (forward_blocks, backward_blocks))
