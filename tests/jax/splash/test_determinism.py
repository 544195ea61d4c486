"""A splash lowering does not depend on what was lowered before it in the process. JAX folds a traced
function's constants by object identity, and upstream's `_process_mask` is an `lru_cache` that hands
out the arrays of whichever call filled an entry: after a VJP-only lowering of the same mask
(which fills the forward and dK/dV entries from one mask object) a training step's forward and
backward kernels share one `q_sequence` constant where a fresh process has two. `tokamax.splash`
builds fresh arrays every call, so its modules are the same text alone, after such a lowering, and
inside `jax.shard_map`; upstream's own public call is shown to change (the scenario is not vacuous),
which is why the tests' lowering helpers clear upstream's cache before every lowering, on both sides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

pytestmark = pytest.mark.kernels_ci

SPLASH = "_src.ops.experimental.tpu.splash_attention"
P = jax.sharding.PartitionSpec
B, HEADS, KV_HEADS, SEQ, DIM = 2, 8, 4, 256, 128


def _lower(kernel, emulation, fn, shapes, mesh=None) -> str:  # noqa: ANN001
    mesh = mesh or emulation.tpu_mesh("v6e")
    with kernel.ops.config.cross_compile(True), emulation.emulated_chip("v6e"), jax.sharding.use_abstract_mesh(mesh):
        return jax.jit(lambda *a: fn(*a)).trace(*shapes).lower(lowering_platforms=("tpu",)).as_text()  # a new trace


def _shapes(batch: int = B, heads: int = HEADS, kv_heads: int = KV_HEADS) -> list[jax.ShapeDtypeStruct]:
    q = jax.ShapeDtypeStruct((batch, heads, SEQ, DIM), jnp.float32)
    kv = jax.ShapeDtypeStruct((batch, kv_heads, SEQ, DIM), jnp.float32)
    return [q, kv, kv, q]


def _step(splash):  # noqa: ANN001, ANN202 - what a training step runs: the forward, then the backward
    spec = splash.MaskSpec("causal")

    def step(q, k, v, dout):  # noqa: ANN001, ANN202
        out, m, lse = splash.attend(q, k, v, None, None, None, spec=spec)
        return out, splash.attend_vjp(q, k, v, None, None, None, out, m, lse, dout, spec=spec)[:3]
    return step


def _vjp_only(kernel, emulation, get) -> None:  # noqa: ANN001
    """Backward-only lowerings of the same causal mask: ours, and upstream's VJP Op (public), which fills
    upstream's mask cache from one mask object."""
    splash = kernel.splash
    spec = splash.MaskSpec("causal")
    q, kv, _, _ = _shapes()
    rows = jax.ShapeDtypeStruct(q.shape[:3], jnp.float32)
    _lower(kernel, emulation, lambda q, k, v, o, m, lse, d: splash.attend_vjp(q, k, v, None, None, None, o, m, lse, d,
                                                                             spec=spec), [q, kv, kv, q, rows, rows, q])
    base, vjp_op = get(f"{SPLASH}.base"), get(f"{SPLASH}.pallas_mosaic_tpu_vjp").PallasMosaicTpuSplashAttentionVjp()
    one = lambda q, k, v, o, d, m, lse: vjp_op((m, lse), o, d, q, k, v, mask=base.CAUSAL_MASK)  # noqa: E731
    q1, kv1, rows1 = (jax.ShapeDtypeStruct(s.shape[1:], s.dtype) for s in (q, kv, rows))  # one sequence
    _lower(kernel, emulation, one, [q1, kv1, kv1, q1, q1, rows1, rows1])


def _sharded_step(kernel, emulation):  # noqa: ANN001, ANN202 - batch and heads over a 2 x 4 v6e mesh
    device = jax.sharding.AbstractDevice(emulation.CHIPS["v6e"][0], 1, "tpu")
    mesh = jax.sharding.AbstractMesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2,
                                     abstract_device=device)
    spec = P("data", "model")
    step = jax.shard_map(_step(kernel.splash), mesh=mesh, in_specs=(spec,) * 4, out_specs=(spec, (spec,) * 3),
                         check_vma=False)
    return step, mesh


def _clear(get) -> None:  # noqa: ANN001
    get(f"{SPLASH}.splash_attention_mask_info")._process_mask.cache_clear()


def test_a_step_lowers_alike_after_a_vjp_only_lowering(kernel, emulation, get):
    _clear(get)
    alone = _lower(kernel, emulation, _step(kernel.splash), _shapes())
    _clear(get)
    _vjp_only(kernel, emulation, get)
    assert _lower(kernel, emulation, _step(kernel.splash), _shapes()) == alone


def test_under_shard_map_too(kernel, emulation, get):
    step, mesh = _sharded_step(kernel, emulation)
    _clear(get)
    alone = _lower(kernel, emulation, step, _shapes(), mesh)
    assert "sdy.manual_computation" in alone
    _clear(get)
    _vjp_only(kernel, emulation, get)
    assert _lower(kernel, emulation, step, _shapes(), mesh) == alone


def test_upstreams_public_call_depends_on_its_cache(kernel, emulation, get):
    """Not vacuous: the same scenario changes the module of upstream's own public call (its forward and
    backward kernels then share one `q_sequence` constant)."""
    base = get(f"{SPLASH}.base")

    def step(q, k, v):  # noqa: ANN001, ANN202 - jax.grad of upstream's public splash call
        loss = lambda q, k, v: jnp.sum(kernel.ops.experimental.splash_attention(  # noqa: E731
            q, k, v, base.CAUSAL_MASK, None, implementation="mosaic_tpu") ** 2)
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)

    q, kv = (jax.ShapeDtypeStruct(s.shape[1:], s.dtype) for s in _shapes()[:2])
    _clear(get)
    alone = _lower(kernel, emulation, step, [q, kv, kv])
    _clear(get)
    _vjp_only(kernel, emulation, get)
    after = _lower(kernel, emulation, step, [q, kv, kv])
    assert after.count("stablehlo.constant") == alone.count("stablehlo.constant") - 1
