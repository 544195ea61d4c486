"""The step benchmark (`tools.chip.step`): every step workload traces for the v5e as it will run on the chip (the
args as shapes), and at a tiny size the decoder with the package's ops (interpret mode) gives the loss and every
weight's gradient of the same decoder with plain XLA ops (`jax.nn.dot_product_attention`, `lax.ragged_dot`, XLA's
head): a dense model, a MoE with skewed routing, Gemma's windowed and global layers with their norms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tools.chip.step import decoder, ops
from tools.chip.step.models import STEPS, Model, Step, attention_pairs, flops, matmul_params
from tools.chip.workloads import attention as attention_workloads
from tools.chip.workloads import step as step_workloads

U = 2.0 ** -24


@pytest.mark.kernels_ci
def test_every_step_workload_traces_for_the_v5e(kernel, emulation):
    traced = []
    with emulation.emulated_chip("v5e"):
        for w in step_workloads.workloads(kernel):
            fn, specs = w.make_specs()
            jax.jit(fn).trace(*specs)
            traced.append((w.case.split(":")[0], w.case.rsplit(", ", 1)[-1], w.impl))
    assert len(traced) == 2 * len(STEPS) + sum(s.tokens <= 8192 for s in STEPS), traced
    for model in ("Llama 3 8B", "Qwen3-30B-A3B", "Gemma 3 4B"):
        assert (model, "8192 tokens" if model != "Gemma 3 4B" else "layers rematerialized",
                step_workloads.TOKAMAX) in traced


def test_the_model_flops_count_each_weight_and_pair():
    m = Model("m", 256, 4, 2, 64, 512, 1000)
    step = Step(m, 1024, 2)
    per_layer = 256 * 64 * (2 * 4 + 2 * 2) + 3 * 256 * 512
    assert matmul_params(m) == per_layer
    assert flops(step) == 6 * 1024 * (2 * per_layer + 256 * 1000) + 2 * 12 * (1024 * 1025 / 2) * 4 * 64
    assert attention_pairs(8, 3) == 3 + 3 + 3 + 3 + 3 + 3 + 2 + 1  # each query its last 3 keys, the first fewer
    gemma = Step(m._replace(window=128, local_per_global=5), 1024, 6)
    assert [gemma.window_of(i) for i in range(6)] == [128] * 5 + [None]


TINY = (
    Step(Model("dense", 128, 2, 1, 128, 256, 520), 256, 1),
    Step(Model("moe", 128, 2, 2, 128, 0, 520, experts=8, top_k=2, expert_intermediate=128, qk_norm=True), 256, 1),
    Step(Model("gemma", 128, 2, 1, 128, 256, 520, window=128, local_per_global=1, gelu=True, qk_norm=True,
               sandwich=True), 256, 2),  # not rematerialized: interpret mode's callbacks are effects remat refuses
)


def _xla_attention(q, k, v, window):  # noqa: ANN001, ANN202
    return attention_workloads._xla(window)(q, k, v)


@pytest.mark.parametrize("step", TINY, ids=[s.model.name for s in TINY])
def test_the_step_with_the_package_ops_matches_plain_xla(kernel, emulation, step):
    params = decoder.init(step, dtype=jnp.float32)
    x, targets = decoder.inputs(step, dtype=jnp.float32)
    plain = decoder.Ops(_xla_attention, jax.lax.ragged_dot, ops._cross_entropy)
    with emulation.interpret_on_cpu("v5e"):
        got_loss, got = jax.jit(decoder.train_step(step, ops.tokamax(kernel)))(params, x, targets)
    want_loss, want = jax.jit(decoder.train_step(step, plain))(params, x, targets)
    # float32 throughout: each op's sums of at most 520 terms err by about sqrt(n) u of their magnitudes, and a
    # step composes a few tens of them; 2^-12 relative (4096 u) holds that with room, where a wrong mask, routing or
    # gradient is off by more than 1%
    assert abs(float(got_loss) - float(want_loss)) <= 2.0 ** -12 * abs(float(want_loss))
    leaves = jax.tree_util.tree_leaves_with_path(want)
    assert len(leaves) == len(jax.tree_util.tree_leaves(got))
    for (path, w), g in zip(leaves, jax.tree_util.tree_leaves(got), strict=True):
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        assert np.linalg.norm(w) > 0, path  # every weight takes a gradient
        assert np.linalg.norm(g - w) <= 2.0 ** -12 * np.linalg.norm(w), (jax.tree_util.keystr(path),
                                                                         np.linalg.norm(g - w) / np.linalg.norm(w))


@pytest.mark.kernels_ci
def test_the_baseline_heads_agree(kernel):
    """The baseline's chunked head (recomputed per chunk in the backward) is the materialized one."""
    r = np.random.default_rng(3)
    x = jnp.asarray(r.standard_normal((8192, 64)), jnp.float32)
    w = jnp.asarray(r.standard_normal((300, 64)) / 8, jnp.float32)
    t = jnp.asarray(r.integers(0, 300, 8192), jnp.int32)
    m = jnp.full((8192,), 1 / 8192, jnp.float32)
    a, da = jax.value_and_grad(ops._cross_entropy, argnums=(0, 1))(x, w, t, m)
    b, db = jax.value_and_grad(ops._chunked_cross_entropy, argnums=(0, 1))(x, w, t, m)
    assert abs(float(a) - float(b)) <= 64 * U * abs(float(a))
    for g, h in zip(da, db, strict=True):
        assert np.linalg.norm(np.asarray(g) - np.asarray(h)) <= 2.0 ** -16 * np.linalg.norm(np.asarray(g))
