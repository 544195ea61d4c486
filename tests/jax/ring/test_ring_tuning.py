"""`tokamax.ring` under an autotuning result: the ring's per-call kernels take no result (the Torch ring
op's exports are not keyed by one, and its backward is traced apart from its forward), so they are
traced under none. A result whose entries name exactly the ring's per-call keys (the forward Op's and
the VJP Op's, as a windowed or offset splash call of those shapes binds them) with other blocks leaves
the ring's forward and backward Mosaic kernels as they are without it, traced inside `tuning.use` or
outside, before or after."""

from __future__ import annotations

import dataclasses
import importlib

import jax
import jax.numpy as jnp
import pytest

from tests.jax.lowering import mosaic_bodies

CHIP = "v6e"
HEADS, LOCAL, DIM, RING = 2, 512, 128, 2  # upstream's heuristics give 128-token blocks at 512 tokens
TUNED_BLOCK = 256


def _specs() -> tuple:
    q = jax.ShapeDtypeStruct((1, HEADS, RING * LOCAL, DIM), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 1, RING * LOCAL, DIM), jnp.bfloat16)
    ids = jax.ShapeDtypeStruct((1, RING * LOCAL), jnp.int32)
    lse = jax.ShapeDtypeStruct((1, HEADS, RING * LOCAL), jnp.float32)
    return q, kv, ids, lse


def _layout(kernel):  # noqa: ANN001, ANN202
    return kernel.ring.Layout(kernel.emulation.tpu_mesh(CHIP, "sp", RING), "sp", None, None, mqa=False, causal=True)


def _bodies(kernel) -> list[list[str]]:  # noqa: ANN001
    """The Mosaic bodies of the ring's forward and backward, lowered for a ring of 2 v6e chips."""
    layout, (q, kv, ids, lse) = _layout(kernel), _specs()
    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip(CHIP), \
            jax.sharding.use_abstract_mesh(layout.mesh):
        fwd = jax.jit(kernel.ring.sharded.forward(layout)).trace(q, kv, kv, ids)
        bwd = jax.jit(kernel.ring.sharded.backward(layout)).trace(q, kv, kv, ids, q, lse, q)
        return [mosaic_bodies(t.lower(lowering_platforms=("tpu",)).as_text()) for t in (fwd, bwd)]


def _ring_bound_arguments(kernel) -> list:  # noqa: ANN001
    """The bound arguments of every upstream Op whose config the ring's trace asks for, abstract, as a
    result file holds them (what `tuning.tune` collects from a call)."""
    op_lib = importlib.import_module(f"{kernel.__name__}._ported._src.ops.op")
    seen, prop = [], op_lib.BoundArguments.default_config

    def recorded(self):  # noqa: ANN001, ANN202
        seen.append(self)
        return prop.fget(self)

    op_lib.BoundArguments.default_config = property(recorded)
    try:
        _bodies(kernel)
    finally:
        op_lib.BoundArguments.default_config = prop
    adapter = op_lib.BOUND_ARGS_ADAPTER
    out = {}
    for ba in seen:
        plain = op_lib.BoundArguments(ba.op.replace(config=None, vjp=None), op_lib._abstractify(dict(ba.arguments)))
        out.setdefault(type(ba.op).__name__, adapter.validate_json(adapter.dump_json(plain)))
    return list(out.values())


@pytest.fixture(scope="module")
def result(kernel):  # noqa: ANN001, ANN201
    """A v6e result naming 256-token blocks for the ring's forward and VJP keys (upstream's heuristics: 128)."""
    root = f"{kernel.__name__}._ported._src"
    bench = importlib.import_module(f"{root}.benchmarking")
    data_cls = importlib.import_module(f"{root}.autotuning.autotuner").AutotuningData
    timings = bench.BenchmarkData(compile_time_ms=1.0, lower_time_ms=1.0, evaluation_times_ms=(1.0,), metadata={})
    entries = []
    for ba in _ring_bound_arguments(kernel):
        with kernel.emulation.emulated_chip(CHIP), jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh(CHIP)):
            heuristic = ba.heuristics_config
        blocks = {f.name: TUNED_BLOCK for f in dataclasses.fields(heuristic)
                  if f.name.startswith("block_") and getattr(heuristic, f.name) is not None}
        assert set(blocks.values()) != {getattr(heuristic, name) for name in blocks}, "the result must differ"
        entries.append((ba, data_cls({dataclasses.replace(heuristic, **blocks): timings})))
    assert {type(ba.op).__name__ for ba, _ in entries} == {"PallasMosaicTpuSplashAttention",
                                                           "PallasMosaicTpuSplashAttentionVjp"}
    return kernel.ops.AutotuningResult(kernel.emulation.CHIPS[CHIP][0], tuple(entries))


def test_a_result_naming_the_rings_keys_does_not_change_its_kernels(kernel, result):
    """The entries match (upstream's lookup of each key under the result picks its blocks), yet the
    ring's forward and backward lower to the same kernels inside the result as without it, before and
    after."""
    before = _bodies(kernel)
    with kernel.tuning.use(result):
        for ba, data in result.data:  # the entries are the ring's keys: a splash call binding them is steered
            with kernel.emulation.emulated_chip(CHIP), \
                    jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh(CHIP)):
                assert ba.default_config == data.fastest_config
        inside = _bodies(kernel)
    after = _bodies(kernel)
    assert all(before) and inside == before, "the ring's kernels changed under an autotuning result"
    assert after == before
