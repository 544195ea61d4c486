"""The chip benchmark's LM-head workloads trace here as they will on the chip (the v5e emulated, the args as
shapes): a variant added for a chip run fails in CI, not after a chip's start-up."""

from __future__ import annotations

import re

import jax
import pytest

from tools.chip.workloads import (
    attention,
    distill,
    lm_head_columns,
    lm_head_statistics,
    lm_head_statistics_columns,
    lm_head_streamed,
    lm_head_vocab,
)
from tools.chip.workloads import lm_head as head_workloads
from tools.chip.zoo import rows as lm_head_rows


def _traced(emulation, workloads, key) -> list:  # noqa: ANN001
    """key(w) of each of `workloads`, each traced for the v5e first (a workload that fails to trace raises)."""
    traced = []
    with emulation.emulated_chip("v5e"):
        for w in workloads:
            fn, specs = w.make_specs()
            jax.jit(fn).trace(*specs)
            traced.append(key(w))
    return traced


@pytest.mark.kernels_ci
def test_every_lm_head_workload_traces_for_the_v5e(kernel, emulation):
    traced = _traced(emulation, head_workloads.workloads(kernel), lambda w: (w.op, w.impl, w.pass_))
    assert ("lm_head_loss", head_workloads.WHOLE, "fwd") in traced
    assert ("lm_head_loss", "tokamax (whole-block bodies, kernels)", "fwd+bwd") in traced
    assert ("lm_head_loss", "tokamax (chunks of 1024, pair accumulator)", "fwd+bwd") not in traced  # retired
    assert ("distillation", head_workloads.WHOLE, "fwd+bwd") in traced
    assert ("distillation", "tokamax (stored)", "fwd+bwd") in traced
    assert ("distillation", "tokamax (kernels)", "fwd+bwd") in traced
    assert ("lm_head_loss", "tokamax (chunks of 1024, pair accumulator, accumulator kernel)", "fwd+bwd") in traced
    assert ("distillation", "tokamax (frozen head)", "fwd+bwd") in traced
    assert ("distillation", "xla (frozen head)", "fwd+bwd") in traced
    assert ("lm_head_loss", "tokamax (chunks of 512, pair accumulator, accumulator kernel)", "fwd+bwd") in traced
    assert ("lm_head_loss", "tokamax (chunks of 1024, pair accumulator, int8 low, accumulator kernel)", "fwd+bwd") \
        in traced
    # per head (Llama 3 8B, Qwen3 8B, Gemma 3 4B) 25 of the loss (3 forwards; the default, the kernels, 3 XLA-added
    # chunks, the whole-block kernels, 5 chunks by the accumulator kernel in 3 ways, XLA); the JSD (10), the
    # frozen head and the KLs (6)
    assert len(traced) == 91, traced


@pytest.mark.kernels_ci
def test_the_distillation_loss_gemma_attention_and_vocabulary_workloads_trace_for_the_v5e(kernel, emulation):
    """Distillation's loss past the stored share (the fused scheme by default and at fixed chunks, the per-token call,
    XLA plain where it fits and checkpointed), Gemma 3's attention at head dim 256 (causal and its window, the
    backward's blocks side by side) and the labels path's vocabulary side by side."""
    traced = []
    with emulation.emulated_chip("v5e"):
        for w in [*distill.workloads(kernel), *lm_head_vocab.workloads(kernel),
                  *(w for w in attention.workloads(kernel) if "Gemma" in w.case and "8192" in w.case)]:
            fn, specs = w.make_specs()
            jax.jit(fn).trace(*specs)
            traced.append((w.op, w.case.split(":")[1].strip()[:11], w.impl, w.pass_))
    assert ("distillation_loss", "16384 rows,", "tokamax (loss)", "fwd+bwd") in traced
    assert not any(t[:2] == ("distillation_loss", "16384 rows,") and t[2] == "xla" for t in traced)  # past the chip
    assert ("attention", "8/4 heads o", "tokamax (backward blocks 512/512/512)", "fwd+bwd") in traced
    assert len([t for t in traced if t[0] == "attention"]) == 2 * (6 + 5), traced  # causal and window
    assert len(traced) == 20 + 8 + 22, traced


@pytest.mark.kernels_ci
def test_the_streamed_head_workloads_trace_for_the_v5e(kernel, emulation):
    """`lm_head_streamed` (run when named only): per head the default and the default without the streamed way, 3
    chunks x 3 accumulators streamed, XLA; the pairs with compact logits in chunks of 1024 at every head and 2048 at
    Gemma 3's (hidden 2560) only; at the four unlisted heads the two defaults, the compact pair in chunks of 1024 and
    XLA."""
    traced = _traced(emulation, lm_head_streamed.workloads(kernel),
                     lambda w: (w.case.split(" head")[0], w.case.split(": ")[1].split(" rows")[0], w.impl))
    assert ("Gemma 3 4B", "8192", "tokamax (chunks of 1024, streamed, pair accumulator, int8 low)") in traced
    assert ("Gemma 3 4B", "8192", "tokamax (chunks of 2048, streamed, compact, pair accumulator, int8 low)") in traced
    assert ("Llama 3 8B", "8192", "tokamax (chunks of 2048, streamed, compact, pair accumulator)") not in traced
    assert ("Gemma 3 4B", "5000", "tokamax (streamed=False)") in traced
    assert ("Llama 3.2 1B", "1500", "tokamax (chunks of 1024, streamed, compact, pair accumulator)") in traced
    assert len(traced) == 3 * 12 + 3 * 2 + 2 + 4 * 4, traced


@pytest.mark.kernels_ci
def test_the_training_rows_workloads_weigh_every_way_the_rules_offer(kernel, emulation):
    """`lm_head_rows` (run when named only): at 4,096 rows of each small head, the forward by the kernel and by XLA's
    formulation in 3 chunkings; forward and backward by the default, the kernels, one chunk, and every way
    `fused._ways` offers at 1,024 and 2,048 rows (none streamed under Gemma 2's soft cap, nor at 2,048); TRL's
    statistics by 3 schemes; XLA beside each; each distillation pair by 4 schemes and XLA; the forward's 4
    chunkings at the benchmark's three heads."""
    traced = _traced(emulation, lm_head_rows.workloads(kernel), lambda w: (w.case.split(" head")[0], w.op, w.impl,
                                                                           w.pass_))
    assert ("Qwen3 0.6B", "lm_head_loss", "tokamax (XLA's formulation, chunks of 2048)", "fwd") in traced
    assert ("Qwen3 0.6B", "lm_head_loss", "tokamax (chunks of 2048, accumulator kernel)", "fwd+bwd") in traced
    assert ("Qwen3 1.7B", "lm_head_loss", "tokamax (chunks of 1024, streamed, compact, pair accumulator)",
            "fwd+bwd") in traced
    gemma = [t for t in traced if t[0] == "Gemma 2 2B" and t[1] == "lm_head_loss"]
    assert not any("streamed" in t[2] for t in gemma) and len(gemma) == 5 + 3 + 2 * 4 + 1, gemma
    assert len([t for t in traced if t[1] == "distillation"]) == 2 * 5
    assert len([t for t in traced if t[1] == "lm_head_statistics"]) == 4 * 4
    # the Qwen heads: 6 ways at 1,024 rows (XLA's accumulator, the kernel's three, streamed in two), 4 at 2,048
    assert len([t for t in traced if t[0] in ("Llama 3 8B", "Qwen3 8B", "Gemma 3 4B")]) == 3 * 4
    assert len(traced) == 3 * (5 + 3 + 6 + 4 + 1) + len(gemma) + 16 + 10 + 3 * 4, traced


@pytest.mark.kernels_ci
def test_every_trl_statistics_workload_traces_for_the_v5e(kernel, emulation):
    """TRL's statistics: the default, the kernels, the stored scheme and XLA at each head, both passes; the layouts
    compared beside the choice; the columns side-by-side at the package's chunk and kept rows."""
    traced = []
    with emulation.emulated_chip("v5e"):
        for module in (lm_head_statistics, lm_head_statistics_columns):
            for w in module.workloads(kernel):
                fn, specs = w.make_specs()
                jax.jit(fn).trace(*specs)
                traced.append((w.case.split(":")[1].split(",")[0].strip(), w.impl, w.pass_))
    for rows in ("2048 rows", "8192 rows"):
        for impl in ("tokamax", "tokamax (kernels)", "tokamax (stored)", "xla"):
            assert (rows, impl, "fwd+bwd") in traced and (rows, impl, "fwd") in traced
    assert ("8192 rows", "tokamax (stored: chunk 512, 5632 kept, columns 8192)", "fwd+bwd") in traced
    assert ("8192 rows", "tokamax (stored: chunk 512, 0 kept, columns 2048)", "fwd+bwd") in traced


@pytest.mark.kernels_ci
def test_distillations_whole_block_variant_reaches_its_backward(kernel, emulation, monkeypatch):
    """`distill.kernels.whole_blocks()` around the whole value-and-grad: the backward kernels, traced after the
    forward returns, are the whole-block bodies too (no `fori_loop` left in any kernel's jaxpr), where the
    default loops (a width below these blocks')."""
    monkeypatch.setattr(kernel.distill.kernels, "COMPUTE", 256)
    shapes = [jax.ShapeDtypeStruct(s, "bfloat16") for s in ((512, 256), (8192, 256), (512, 384), (8192, 384))]
    variants = {w.impl: w for w in head_workloads.workloads(kernel)
                if w.op == "distillation" and w.pass_ == "fwd+bwd"}
    with emulation.emulated_chip("v5e"):
        for impl, loops in (("tokamax (kernels)", True), (head_workloads.WHOLE, False)):
            fn, _ = variants[impl].make_specs()
            text = str(jax.make_jaxpr(fn)(*shapes))
            kernels = {name.split("_")[3] for name in re.findall(r"tokamax_distill_jsd_\w+", text)}
            assert kernels == {"fwd", "dx", "dw"}, (impl, kernels)
            assert ("while[" in text or "scan[" in text) == loops, impl


@pytest.mark.kernels_ci
def test_the_whole_block_plan_turns_the_inner_loop_off(kernel, emulation):
    """The side-by-side's baseline: the package's blocks with each kernel's body over its whole block."""
    lm_head = kernel.lm_head
    x = jax.ShapeDtypeStruct((8192, 4096), "bfloat16")
    w = jax.ShapeDtypeStruct((128256, 4096), "bfloat16")
    with emulation.emulated_chip("v5e"):
        chosen = lm_head.stats.plan_for(x, w)
        whole = head_workloads.whole_blocks(lm_head, x, w)
    for k in lm_head.blocks.KERNELS:
        assert (whole[k].rows, whole[k].vocab) == (chosen[k].rows, chosen[k].vocab)
        assert lm_head.kernels._width(k, whole[k]) == whole[k].vocab
        assert lm_head.kernels._width(k, chosen[k]) == min(lm_head.kernels.COMPUTE[k], chosen[k].vocab)


@pytest.mark.kernels_ci
def test_the_column_width_workloads_trace_and_set_the_width(kernel, emulation):
    """`bench --only lm_head_columns`: the labels path's kernels at each width, the whole block among them."""
    lm_head = kernel.lm_head
    traced = []
    with emulation.emulated_chip("v5e"):
        for w in lm_head_columns.workloads(kernel):
            fn, specs = w.make_specs()
            jax.jit(fn).trace(*specs)
            traced.append((w.impl, w.pass_))
        x = jax.ShapeDtypeStruct((8192, 4096), "bfloat16")
        w = jax.ShapeDtypeStruct((128256, 4096), "bfloat16")
        narrow = head_workloads.with_columns(lm_head, x, w, 256)
    assert ("tokamax (columns of 256)", "fwd") in traced
    assert ("tokamax (whole-block bodies, kernels)", "fwd+bwd") in traced
    assert len(traced) == len(lm_head_columns.FORWARD) + len(lm_head_columns.BACKWARD)
    assert all(lm_head.kernels._width(k, narrow[k]) == 256 for k in lm_head.blocks.KERNELS)
