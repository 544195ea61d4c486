"""The `step` family's cases are the chip benchmark's steps (tools/chip/step) at 4,096 tokens on every chip, and its
default tier stays small: one model (Llama 3 8B's layer and head) per chip, the MoE and Gemma 3 only under `--all`.
The compiling itself is test_compile's (each case's `check`); this needs no libtpu."""

from __future__ import annotations

from tools.chip.step.models import GEMMA_3_4B, LLAMA_3_8B, QWEN3_30B_A3B, STEPS
from tools.tpu_compile.cases import step

CHIPS = ("v5e", "v6e", "v7x")


def _targets(tier: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for case in step.cases():
        if case.tier == tier:
            out.setdefault(case.model, []).append(case.target)
    return out


def test_each_model_is_compiled_on_every_chip():
    assert sorted((c.model, c.target) for c in step.cases()) == sorted(
        (m.name, chip) for m in (LLAMA_3_8B, QWEN3_30B_A3B, GEMMA_3_4B) for chip in CHIPS)


def test_the_default_tier_is_one_model_per_chip():
    assert _targets("default") == {LLAMA_3_8B.name: list(CHIPS)}
    assert _targets("all") == {QWEN3_30B_A3B.name: list(CHIPS), GEMMA_3_4B.name: list(CHIPS)}


def test_the_steps_are_the_chip_benchmarks():
    for model in (LLAMA_3_8B, QWEN3_30B_A3B, GEMMA_3_4B):
        chosen = step.step_of(model)
        assert chosen in STEPS and chosen.tokens == step.TOKENS == 4096 and not chosen.remat


def test_the_least_kernels_count_attention_and_experts():
    assert step.least_kernels(step.step_of(LLAMA_3_8B)) == 2  # splash forward and backward
    assert step.least_kernels(step.step_of(QWEN3_30B_A3B)) == 8  # and three grouped matmuls each for two
    assert step.least_kernels(step.step_of(GEMMA_3_4B)) == 12  # six layers of splash
