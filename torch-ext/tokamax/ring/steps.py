"""Ring attention on one chip's shards, inside a `shard_map` over the ring axis: our own scan over
upstream's per-call splash kernels (`_splash_attention_forward` / `_splash_attention_bwd`, what
upstream's ring runs per step), so that the mask is lazy and the ring may be load-balanced.

Per ring step each chip attends its queries to the KV slice it holds now, one kernel call per
contiguous run of that slice (1 on the contiguous ring, 2 on the head-tail ring: `layout`), each with
a schedule made in the graph from positions (`schedule.call_info`); the calls' softmax statistics
merge in base e as upstream's ring merges its steps. K, V, their segment ids and their positions
travel round the ring together (`ppermute`; 4 bytes per token for the positions), so every call
masks by true position. The backward runs upstream's splash backward per call on the global output
and logsumexp; dq accumulates on its chip, dK/dV accumulators travel with K/V and are home after the
last step. Blocks and the rest of each kernel's config are upstream's Op's choice for the call's
shapes (its forward Op and its VJP Op, as upstream's public call picks them, under no autotuning
result: the ring's ops take none), with natural-base exponentials (the merge needs them) and the
causal-diagonal skips off (they assume positions the kernel computes itself).

Shapes per chip: q [heads, L, head_dim]; k, v [kv_heads, L, head_dim] or [L, head_dim] (multi-query);
segment ids int32 [L] each (always given: upstream's kernel compacts its schedule with them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ..splash import _upstream
from ..splash.masks import MaskSpec
from . import schedule


@dataclasses.dataclass(frozen=True)
class Plan:
    """What every chip's scan needs to know when tracing."""

    spec: MaskSpec
    balanced: bool
    axis: str
    mqa: bool

    @property
    def runs(self) -> int:
        return 2 if self.balanced else 1


def _positions(plan: Plan, local_len: int) -> jax.Array:
    """int32 [L]: the original positions of this chip's tokens (`layout.chip_positions`, traced)."""
    chip, size = lax.axis_index(plan.axis), lax.axis_size(plan.axis)
    if not plan.balanced:
        return chip * local_len + jnp.arange(local_len, dtype=jnp.int32)
    chunk = local_len // 2
    iota = jnp.arange(chunk, dtype=jnp.int32)
    return jnp.concatenate([chip * chunk + iota, (2 * size - 1 - chip) * chunk + iota])


def _shift(plan: Plan, tree: Any) -> Any:
    size = lax.axis_size(plan.axis)
    return lax.ppermute(tree, plan.axis, perm=[(i, (i + 1) % size) for i in range(size)])


def _kv_axis(plan: Plan) -> int:
    return 0 if plan.mqa else 1


def _run(plan: Plan, x: jax.Array, run: int) -> jax.Array:
    """Run `run` of a KV-side array (k, v, their ids or positions) along its sequence axis."""
    axis = 0 if x.ndim == 1 else _kv_axis(plan)
    length = x.shape[axis] // plan.runs
    return lax.slice_in_dim(x, run * length, (run + 1) * length, axis=axis)


def _tuned(config: Any, **blocks: Any) -> Any:
    """A SplashConfig from an Op's config as upstream's Ops build it, with natural-base exponentials
    and no causal-diagonal skips."""
    lib = _upstream.kernel()
    return dataclasses.replace(lib.SplashConfig.get_default(), dropout_rate=0.0, attn_logits_soft_cap=None,
                               **{**dataclasses.asdict(config), **blocks, "use_base2_exp": False,
                                  "qk_diag_skip": False, "sv_diag_skip": False})


@contextlib.contextmanager
def _no_result() -> Iterator[None]:
    """Upstream's config choice without any applied autotuning result (its shipped table, else its
    heuristics). The ring's ops take no result: the Torch op's exports are not keyed by one and its
    backward is traced apart from its forward, so an entry of the same key (a windowed or offset splash
    call of these shapes) would reach whichever trace ran inside a `tuning.use` block, and not the rest."""
    stack = importlib.import_module(".._ported._src.ops.op", __package__).AUTOTUNING_CACHE_OVERLAY_STACK
    reset = stack.set(())
    try:
        yield
    finally:
        stack.reset(reset)


def _stand_in(plan: Plan, q: jax.Array, run_len: int) -> Any:
    return plan.spec.stand_in((q.shape[1], run_len), None)


def _ids(q_ids: jax.Array, kv_ids: jax.Array) -> Any:
    return _upstream.base().SegmentIds(q_ids, kv_ids)


def forward_config(plan: Plan, q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array, kv_ids: jax.Array) -> Any:
    """The forward kernels' SplashConfig: upstream's forward Op's choice for one call."""
    k_run, v_run, ids_run = (_run(plan, x, 0) for x in (k, v, kv_ids))
    args = _upstream.op_arguments((q_ids, ids_run), None, plan.mqa, None)
    with _no_result():
        config = _upstream.bind_as_public(_upstream.forward_op(), _stand_in(plan, q, ids_run.shape[0]), q, k_run,
                                          v_run, **args, return_residuals=True).default_config
    return _tuned(config, block_q_dkv=None, block_kv_dkv=None, block_kv_dkv_compute=None)


def backward_config(plan: Plan, q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array, kv_ids: jax.Array,
                    out: jax.Array, lse: jax.Array, dout: jax.Array) -> Any:
    """The backward kernels' SplashConfig: upstream's VJP Op's choice for one call."""
    k_run, v_run, ids_run = (_run(plan, x, 0) for x in (k, v, kv_ids))
    args = _upstream.op_arguments((q_ids, ids_run), None, plan.mqa, None)
    with _no_result():
        config = _upstream.vjp_op().bind((lse, lse), out, dout, q, k_run, v_run,
                                         mask=_stand_in(plan, q, ids_run.shape[0]), **args).default_config
    return _tuned(config, block_q=config.block_q_dkv, block_kv=config.block_kv_dkv,
                  block_kv_compute=config.block_kv_dkv_compute)


def forward(plan: Plan, q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array, kv_ids: jax.Array
            ) -> tuple[jax.Array, jax.Array]:
    """(out [heads, L, head_dim_v], logsumexp float32 [heads, L]) of this chip's queries over the ring."""
    lib, mask_value = _upstream.kernel(), _upstream.base().DEFAULT_MASK_VALUE
    local_len = q.shape[1]
    run_len = local_len // plan.runs
    config = forward_config(plan, q, k, v, q_ids, kv_ids)
    schedule.check_smem(local_len, run_len, config.block_q, config.block_kv, "forward")
    q_pos = _positions(plan, local_len)
    call = functools.partial(lib._splash_attention_forward, sinks=None, mask_value=mask_value, is_mqa=plan.mqa,
                             config=config, save_residuals=True, mask_function=plan.spec.function(),
                             fwd_mask_sparsity=1.0)
    heads = q.shape[0]
    m = jnp.full((heads, local_len), mask_value, jnp.float32)
    l_sum = jnp.zeros((heads, local_len), jnp.float32)
    o = jnp.zeros((heads, local_len, v.shape[-1]), jnp.float32)

    def step(carry: tuple, _: Any) -> tuple[tuple, None]:
        m, l_sum, o, kv = carry
        k, v, kv_ids, kv_pos = kv
        following = _shift(plan, kv)  # the next step's K/V on their way while this one computes
        for run in range(plan.runs):
            q_seq = q_pos - _run(plan, kv_pos, run)[0]
            info = schedule.call_info(plan.spec, q_seq, run_len, config.block_q, config.block_kv, is_dkv=False)
            out_c, stats = call(info, q, _run(plan, k, run), _run(plan, v, run),
                                _ids(q_ids, _run(plan, kv_ids, run)))
            m_c, lse_c = stats["max_logits"], stats["logsumexp"]
            l_c = jnp.exp(lse_c - m_c)
            m_next = jnp.maximum(m, m_c)
            alpha, beta = jnp.exp(m - m_next), jnp.exp(m_c - m_next)
            l_sum = alpha * l_sum + beta * l_c
            o = alpha[..., None] * o + beta[..., None] * (out_c.astype(jnp.float32) * l_c[..., None])
            m = m_next
        return (m, l_sum, o, following), None

    kv = (k, v, kv_ids, q_pos)  # each chip's keys sit where its queries do
    (m, l_sum, o, _), _ = lax.scan(step, (m, l_sum, o, kv), length=lax.axis_size(plan.axis), unroll=True)
    inverse = jnp.where(l_sum == 0.0, 0.0, 1.0 / l_sum)
    out = (o * inverse[..., None]).astype(q.dtype)
    lse = jnp.where(l_sum == 0.0, mask_value, jnp.log(l_sum) + m)
    return out, lse


def backward(plan: Plan, q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array, kv_ids: jax.Array,
             out: jax.Array, lse: jax.Array, dout: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv) of `forward`, shaped and typed as q, k, v."""
    lib, mask_value = _upstream.kernel(), _upstream.base().DEFAULT_MASK_VALUE
    local_len = q.shape[1]
    run_len = local_len // plan.runs
    config = backward_config(plan, q, k, v, q_ids, kv_ids, out, lse, dout)
    schedule.check_smem(local_len, run_len, config.block_q_dkv, config.block_kv_dkv, "dK/dV")
    q_pos = _positions(plan, local_len)
    call = functools.partial(lib._splash_attention_bwd, False, mask_value, plan.mqa, config, plan.spec.function(),
                             1.0, 1.0)
    dout = dout.astype(jnp.float32)

    def step(carry: tuple, _: Any) -> tuple[tuple, None]:
        dq, dk, dv, kv = carry
        k, v, kv_ids, kv_pos = kv
        following = _shift(plan, kv)
        dks, dvs = [], []
        for run in range(plan.runs):
            q_seq = q_pos - _run(plan, kv_pos, run)[0]
            info = schedule.call_info(plan.spec, q_seq, run_len, config.block_q_dkv, config.block_kv_dkv, is_dkv=True)
            residuals = (q, _run(plan, k, run), _run(plan, v, run), _ids(q_ids, _run(plan, kv_ids, run)), None, out,
                         lse, info, None)
            _, _, dq_c, dk_c, dv_c, *_ = call(res=residuals, grads=dout)
            dq = dq + dq_c.astype(jnp.float32)
            dks.append(dk_c.astype(jnp.float32))
            dvs.append(dv_c.astype(jnp.float32))
        axis = _kv_axis(plan)
        dk, dv = _shift(plan, (dk + jnp.concatenate(dks, axis), dv + jnp.concatenate(dvs, axis)))
        return (dq, dk, dv, following), None

    start = (jnp.zeros(q.shape, jnp.float32), jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32),
             (k, v, kv_ids, q_pos))
    (dq, dk, dv, _), _ = lax.scan(step, start, length=lax.axis_size(plan.axis), unroll=True)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)
