"""A few of the model zoo's workloads (tools/chip/zoo) compiled by libtpu for a compile-only v5e, as the chip will
compile them: the options no benchmark workload has (Gemma 2's soft cap and window, gpt-oss's sinks, DeepSeek's MLA
head dims) on the package's side and the alternatives', and `zoo.memory`'s estimate of XLA's head against what the
compiler assigns, which decides what the plan skips."""

from __future__ import annotations

import jax
import pytest

from tools.chip.zoo import memory, plan, select
from tools.chip.zoo import workloads as zoo_workloads
from tools.tpu_compile import compiler, topology

pytestmark = pytest.mark.kernels_ci


def _entries(model: str, tokens: int, op: str, pass_: str, ways: tuple[str, ...]) -> list[plan.Entry]:
    part = select.Selection(frozenset({model}), frozenset({tokens}), frozenset({op}))
    return [e for e in select.chosen(plan.entries(), part) if e.pass_ == pass_ and e.way in ways and not e.skipped]


def _compiled(kernel, e: plan.Entry):  # noqa: ANN001, ANN202
    w = zoo_workloads.workload(kernel, e)
    with compiler.tracing_for(kernel, "v5e"), jax.set_mesh(topology.mesh("v5e")):
        fn, specs = w.make_specs()
        return jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",)).compile()


@pytest.mark.parametrize("model, tokens, ways", [
    ("Gemma 2 2B", 8192, ("tokamax",)),  # soft cap 50, causal and within the window of 4,096
    ("gpt-oss-20b", 256, ("tokamax", "xla")),  # window 128 and sinks
    ("DeepSeek-V2-Lite", 1024, ("tokamax",)),  # q and k of 192, v of 128
])
def test_the_zoos_attention_options_compile_for_the_v5e(kernel, model, tokens, ways):
    entries = _entries(model, tokens, "attention", "fwd+bwd", ways)
    assert entries
    for e in entries:
        counts = compiler.hlo_counts(_compiled(kernel, e).as_text())
        assert e.way == "xla" or counts["tpu_custom_call"] >= 2, (e.case, e.impl, counts)  # forward and backward


@pytest.mark.parametrize("model, tokens", [("Gemma 2 2B", 4096), ("Qwen2.5 72B", 8192)])
def test_the_memory_estimate_is_what_the_compiler_assigns(kernel, model, tokens):
    """XLA's statistics forward and backward (Gemma 2's under its soft cap): the estimate the plan skips by."""
    (e,) = _entries(model, tokens, "lm_head_statistics", "fwd+bwd", ("xla",))
    m = _compiled(kernel, e).memory_analysis()
    total = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
    assert abs(memory.need(e.call, e.way, e.pass_) - total) < 0.5 * memory.GiB, (e.case, total / memory.GiB)


def _bytes(compiled) -> float:  # noqa: ANN001
    cost = compiled.cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["bytes accessed"])


@pytest.mark.parametrize("op", ["distillation", "distillation_loss"])
def test_distillation_at_a_prefills_rows_compiles_to_xlas_formulation(kernel, op):
    """Qwen3 1.7B <- 8B at 128 tokens, forward and backward (the per-token JSD, the loss's forward KL): no kernel
    (the stored scheme's one chunk, `distill.stored.PREFILL`; the loss's dw by XLA, `distill.fused.ONE_CHUNK`) and
    no more bytes than XLA's plain program by the compiler's count. Before, the per-token call ran the kernels
    (6.51 GB, twice the flops) and the loss the accumulate kernel around one addition (6.20 GB; XLA's 4.22)."""
    [ours] = _entries("Qwen3 1.7B", 128, op, "fwd+bwd", ("tokamax",))
    [xla] = _entries("Qwen3 1.7B", 128, op, "fwd+bwd", ("xla",))
    mine, theirs = _compiled(kernel, ours), _compiled(kernel, xla)
    assert compiler.hlo_counts(mine.as_text())["tpu_custom_call"] == 0, ours.case
    assert _bytes(mine) <= _bytes(theirs), (ours.case, _bytes(mine) / 1e9, _bytes(theirs) / 1e9)


def test_trls_statistics_under_a_soft_cap_at_a_prefills_rows_compile_to_xlas_formulation(kernel):
    """Gemma 2 2B's head (soft cap 30) at 256 tokens, forward and backward: the stored scheme's one chunk keeping
    its float32 logits (`lm_head.stored.KEPT_LOGITS`), no kernel, XLA's three matmuls' flops (the kernels' five
    before: 1,510 GFLOP, 0.82x XLA's speed on the v5e) and no more bytes than XLA's plain program."""
    [ours] = _entries("Gemma 2 2B", 256, "lm_head_statistics", "fwd+bwd", ("tokamax",))
    [xla] = _entries("Gemma 2 2B", 256, "lm_head_statistics", "fwd+bwd", ("xla",))
    mine, theirs = _compiled(kernel, ours), _compiled(kernel, xla)
    assert compiler.hlo_counts(mine.as_text())["tpu_custom_call"] == 0, ours.case
    flops = [float((c[0] if isinstance(c, (list, tuple)) else c)["flops"])
             for c in (mine.cost_analysis(), theirs.cost_analysis())]
    assert flops[0] <= flops[1], flops
    assert _bytes(mine) <= _bytes(theirs), (_bytes(mine) / 1e9, _bytes(theirs) / 1e9)
