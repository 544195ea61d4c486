"""Upstream's public ops as JAX users shard them (MaxText style: the op inside `jax.shard_map`), on
either side (upstream's `tokamax` or this kernel, through `tests/jax/public/api.py`).

A `ShardedCase` is one sharded call: the mesh it runs on, its inputs, `sharded(api, mesh)` (the
op in a `shard_map` over `mesh`: an 8-device mesh of host CPUs for values, an abstract TPU mesh for
lowering), `unsharded(api)` (the same op on the whole arrays, one device) and `shard(api)` (what each
chip runs, on its shard's shapes; None where it needs the mesh's collectives). Gradients are of
sum(out^2) in the arguments `grads` names (None: no VJP, or values not checked).

Imports only jax and numpy, so the upstream venv loads it too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

P = jax.sharding.PartitionSpec
SPLASH = "_src.ops.experimental.tpu.splash_attention"
RING = f"{SPLASH}.ring_attention_kernel"
CHIPS = ("v6e",)  # lowered for each (every chip's unsharded calls: tests/jax/public); values run as v6e


@dataclasses.dataclass(frozen=True)
class ShardedCase:
    id: str
    mesh_shape: tuple[int, ...]
    axes: tuple[str, ...]
    inputs: Callable[[], tuple[np.ndarray, ...]]
    in_specs: tuple[Any, ...]  # the shard_map's in_specs over the inputs
    out_specs: Any
    shard: Callable[[Any], Callable[..., Any]] | None  # api -> what one chip runs on its shards
    unsharded: Callable[[Any], Callable[..., Any]] | None  # api -> the op on whole arrays (None: lowering only)
    grads: tuple[int, ...] | None = None  # arguments to differentiate sum(out^2) in
    tolerance: tuple[float, float] = (1e-4, 1e-4)  # (rtol, atol), sharded against unsharded
    tolerance_why: str = ""
    sharded_call: Callable[[Any, Any], Callable[..., Any]] | None = None  # (api, mesh) -> fn, if not shard_map(shard)
    values_why_not: str | None = None  # why the interpreter cannot check values (lowering only)

    def sharded(self, api: Any, mesh: Any) -> Callable[..., Any]:
        if self.sharded_call is not None:
            return self.sharded_call(api, mesh)
        return jax.shard_map(self.shard(api), mesh=mesh, in_specs=self.in_specs, out_specs=self.out_specs,
                             check_vma=False)

    def shapes(self) -> list[jax.ShapeDtypeStruct]:
        return [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in self.inputs()]

    def local_shapes(self) -> list[jax.ShapeDtypeStruct]:
        """Each input's shard on one chip."""
        sizes = dict(zip(self.axes, self.mesh_shape, strict=True))
        out = []
        for spec, x in zip(self.in_specs, self.shapes(), strict=True):
            dims = tuple(d // math.prod(sizes[a] for a in (s if isinstance(s, tuple) else (s,)) if a is not None)
                         for d, s in zip(x.shape, tuple(spec) + (None,) * (len(x.shape) - len(spec)), strict=True))
            out.append(jax.ShapeDtypeStruct(dims, x.dtype))
        return out


def program(fn: Callable[..., Any], grads: tuple[int, ...] | None) -> Callable[..., Any]:
    """fn's output and, with `grads`, the gradients of sum(out^2) in f32 in those arguments: one program
    holding the forward and backward kernels (one trace and compile, not two)."""
    if grads is None:
        return fn

    def loss(*args: Any) -> tuple[Any, Any]:
        out = fn(*args)
        return jnp.sum(jnp.square(out.astype(jnp.float32))), out

    def both(*args: Any) -> tuple[Any, ...]:
        (_, out), gradients = jax.value_and_grad(loss, argnums=grads, has_aux=True)(*args)
        return (out, *gradients)

    return both


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---- Ragged dot, experts sharded ----------------------------------------------------------------
EXPERTS, SHARDS, ROWS, K, N = 16, 8, 128, 128, 128


def _expert_inputs() -> tuple[np.ndarray, ...]:
    """Rows sorted by expert, each shard's two experts owning its 128 rows (uneven, one split 0/128)."""
    r = _rng(31)
    first = r.integers(1, ROWS, size=SHARDS)
    first[3] = 0
    sizes = np.stack([first, ROWS - first], 1).reshape(-1).astype(np.int32)
    return (r.standard_normal((SHARDS * ROWS, K), np.float32), r.standard_normal((EXPERTS, K, N), np.float32) * 0.1,
            sizes)


def _ragged_dot(api: Any) -> Callable[..., Any]:
    return lambda lhs, rhs, sizes: api.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic")


def _ep_inputs() -> tuple[np.ndarray, ...]:
    """Upstream's expert parallel layout: every row everywhere, each shard its experts' weights and
    its first expert as the group offset."""
    r = _rng(37)
    sizes = r.multinomial(512, np.ones(EXPERTS) / EXPERTS).astype(np.int32)
    return (r.standard_normal((512, 256)).astype(jnp.bfloat16), r.standard_normal((EXPERTS, 256, 384)).astype(
        jnp.bfloat16), sizes, np.arange(0, EXPERTS, EXPERTS // SHARDS, dtype=np.int32))


def _ep_shard(api: Any) -> Callable[..., Any]:
    def shard(lhs: Any, rhs: Any, sizes: Any, offset: Any) -> Any:
        out = api.ops.ragged_dot(lhs, rhs, sizes, group_offset=offset, zero_initialize=True,
                                 implementation="mosaic_tpu_v2")
        return jax.lax.psum(out, "expert")  # each shard's rows are its experts'; the rest zero
    return shard


# ---- Splash and flash attention over batch and heads --------------------------------------------
B, HEADS, KV_HEADS, SEQ, DIM = 2, 8, 4, 256, 128


def _attention_inputs(heads_first: bool, seed: int) -> tuple[np.ndarray, ...]:
    r = _rng(seed)
    q_shape, kv_shape = ((B, HEADS, SEQ, DIM), (B, KV_HEADS, SEQ, DIM)) if heads_first else (
        (B, SEQ, HEADS, DIM), (B, SEQ, KV_HEADS, DIM))
    return (r.standard_normal(q_shape, np.float32) * DIM**-0.5, r.standard_normal(kv_shape, np.float32) * DIM**-0.5,
            r.standard_normal(kv_shape, np.float32))


def _splash(api: Any) -> Callable[..., Any]:
    """The public splash op per sequence ([heads, len, dim]), `jax.vmap`-ed over the batch."""
    causal = api.module(f"{SPLASH}.base").CAUSAL_MASK
    one = lambda q, k, v: api.ops.experimental.splash_attention(q, k, v, causal, None,  # noqa: E731
                                                                implementation="mosaic_tpu")
    return jax.vmap(one)


def _flash(api: Any) -> Callable[..., Any]:
    return lambda q, k, v: api.ops.dot_product_attention(q, k, v, is_causal=True, implementation="mosaic")


# ---- Linear softmax cross-entropy over rows -----------------------------------------------------
def _loss_inputs() -> tuple[np.ndarray, ...]:
    r = _rng(41)
    return (r.standard_normal((1024, 128), np.float32) * 128**-0.5, r.integers(0, 512, 1024).astype(np.int32),
            r.standard_normal((128, 512), np.float32))


def _loss(api: Any) -> Callable[..., Any]:
    return lambda x, labels, w: api.ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="none",
                                                                          implementation="mosaic_tpu")


# ---- Ring attention over the sequence (and heads) -----------------------------------------------
RING_HEADS, RING_SEQ = 4, 512


def _ring_inputs() -> tuple[np.ndarray, ...]:
    r = _rng(43)
    shape = (RING_HEADS, RING_SEQ, DIM)
    return (r.standard_normal(shape, np.float32) * DIM**-0.5, r.standard_normal(shape, np.float32) * DIM**-0.5,
            r.standard_normal(shape, np.float32))


def _ring_sharded(api: Any, mesh: Any) -> Callable[..., Any]:
    """Upstream's ring kernel as its own test runs it: the dense causal mask, K/V round the "sp" ring
    (base-2 exponentials off: the ring merges its steps' statistics in base e), heads over "model"."""
    splash = api.module(f"{SPLASH}.splash_attention_kernel")
    config = dataclasses.replace(splash.SplashConfig.get_default(), use_base2_exp=False)
    ring = mesh.shape["sp"]
    spec = P("model", "sp", None)

    def fn(q: Any, k: Any, v: Any) -> Any:
        kernel = api.module(RING).make_ring_attention(
            api.module(f"{SPLASH}.splash_attention_mask").make_causal_mask((RING_SEQ, RING_SEQ)), is_mqa=False,
            ring_axis="sp", config=config, q_seq_shards=ring, kv_seq_shards=ring)
        attend = jax.shard_map(lambda kern, q, k, v: kern(q, k, v), mesh=mesh, out_specs=spec, check_vma=False,
                               in_specs=(kernel.manual_sharding_spec(), spec, spec, spec))
        return attend(kernel, q, k, v)

    return fn


def _ring_unsharded(api: Any) -> Callable[..., Any]:
    causal = api.module(f"{SPLASH}.base").CAUSAL_MASK
    return lambda q, k, v: api.ops.experimental.splash_attention(q, k, v, causal, None, implementation="mosaic_tpu")


ATTENTION_WHY = "f32; the sharded and whole calls tile the softmax differently: summation order only, ~1e-6"
CASES = [
    ShardedCase("ragged_dot/mosaic/experts-sharded", (SHARDS,), ("expert",), _expert_inputs,
                (P("expert"), P("expert"), P("expert")), P("expert"), _ragged_dot, _ragged_dot, grads=(0, 1),
                tolerance=(1e-4, 1e-3), tolerance_why="f32, values ~10: one 128-row tile per shard, four whole"),
    *(ShardedCase(f"ragged_dot/mosaic_tpu_v2/expert-parallel-group-offset{suffix}", (SHARDS,), ("expert",),
                  _ep_inputs, (P(), P("expert"), P(), P("expert")), P(), None, None, grads=grads,
                  sharded_call=lambda api, mesh: jax.shard_map(_ep_shard(api), mesh=mesh, in_specs=(
                      P(), P("expert"), P(), P("expert")), out_specs=P(), check_vma=False),
                  values_why_not="gmm_v2 and tgmm_v2 do not run in JAX's Pallas TPU interpreter (DESIGN §3)")
      for suffix, grads in (("", None), ("/grad", (0, 1)))),  # upstream's VJP refuses a group offset
    ShardedCase("splash/batch-heads", (2, 4), ("data", "model"), lambda: _attention_inputs(True, 47),
                (P("data", "model"),) * 3, P("data", "model"), _splash, _splash, grads=(0, 1, 2),
                tolerance_why=ATTENTION_WHY),
    ShardedCase("flash/batch-heads", (2, 4), ("data", "model"), lambda: _attention_inputs(False, 53),
                (P("data", None, "model"),) * 3, P("data", None, "model"), _flash, _flash, grads=(0, 1, 2),
                tolerance_why=ATTENTION_WHY),
    ShardedCase("linear_softmax_cross_entropy_loss/rows", (SHARDS,), ("data",), _loss_inputs,
                (P("data"), P("data"), P()), P("data"), _loss, _loss, grads=(0, 2),
                tolerance_why="f32; per-row statistics are the same rows' sums, w's gradient summed over shards"),
    ShardedCase("ring_attention/sequence-heads", (2, 4), ("model", "sp"), _ring_inputs,
                (P("model", "sp"),) * 3, P("model", "sp"), None, _ring_unsharded, grads=(0, 1, 2),
                sharded_call=_ring_sharded, tolerance_why=ATTENTION_WHY + "; the ring merges 4 steps' statistics"),
]
BY_ID = {case.id: case for case in CASES}
