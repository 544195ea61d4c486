"""The labels path's training loss with its gradients from the forward (`tokamax.lm_head.fused`,
`loss_and_grads` at the scheme it picks on each chip) at the LM-head issue's step: 16,384 tokens,
hidden 4096, bf16, Qwen's and Llama's vocabularies. On v7x it picks Liger's chunked scheme: three
vocabulary-sized XLA matmuls (dot ops, no kernel; XLA's flop count says three), temporaries within its
own estimate (`fused.cost(...).temp_bytes`) and an eighth of HBM; on v5e (16 GB) and v6e (32 GB) our three
kernels (the chunks that fit there lose to them once the accumulator's cost the v5e measured is counted)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from . import _models as m

TOKENS, MODELS = 16384, (m.QWEN3_8B, m.LLAMA_3_8B)
_PICKED: dict[tuple[str, int], tuple[int | None, Any]] = {}
"""(chunk, its `fused.cost`) per (chip, vocab), noted when the case is built (it has the kernel)."""


def _build(chip: str, hidden: int, vocab: int) -> Any:
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        lm_head = kernel.lm_head
        with kernel.emulation.emulated_chip(chip):
            on = lm_head.cost.chip()
        chunk = lm_head.fused.choose(TOKENS, hidden, vocab, 2, on)
        _PICKED[chip, vocab] = (chunk, chunk and lm_head.fused.cost(TOKENS, hidden, vocab, 2, chunk))
        specs = [spec(mesh, (TOKENS, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
                 spec(mesh, (TOKENS,), jnp.int32), spec(mesh, (TOKENS,), jnp.float32)]

        def step(x: Any, w: Any, targets: Any, weights: Any) -> Any:
            return lm_head.fused.loss_and_grads(x, w, None, targets, weights, lm_head.IDENTITY)
        return step, specs
    return build


def _check(chip: str, vocab: int) -> Any:
    def check(outcome: Any) -> None:
        chunk, estimate = _PICKED[chip, vocab]
        kernels, temp = outcome.hlo["tpu_custom_call"], outcome.memory["temp"]
        if chip in ("v5e", "v6e"):
            assert chunk is None and kernels == 3, f"{outcome.name}: chunk {chunk}, {kernels} kernels; expected ours"
            return
        assert chunk and kernels == 0, f"{outcome.name}: chunk {chunk}, {kernels} kernels; expected the chunked scheme"
        assert temp <= estimate.temp_bytes, f"{outcome.name}: {temp / 2**30:.2f} GiB of temporaries over the " \
                                            f"estimate {estimate.temp_bytes / 2**30:.2f} GiB the scheme was chosen by"
        # three matmuls: XLA's own count, which takes the scan's body once (one chunk); its elementwise ops add
        # tens of flops per logit against the matmuls' 6 x hidden (about 0.2% at hidden 4096)
        per_chunk = estimate.flops * chunk // TOKENS
        assert per_chunk <= outcome.cost["flops"] <= 1.005 * per_chunk, \
            f"{outcome.name}: {outcome.cost['flops']:.4g} flops per chunk, three matmuls are {per_chunk:.4g}"
    return check


def cases() -> list[Case]:
    out = []
    for model in MODELS:
        out += on_chips(lambda chip, model=model: Case(
            f"lm_head_fused/step-{TOKENS}/{model.name}/h{model.hidden}-v{model.vocab}/loss+grads", "lm_head_fused",
            model.name, chip, _build(chip, model.hidden, model.vocab),
            tier="default" if model is m.QWEN3_8B else "all", check=_check(chip, model.vocab), xla_only=True))
    return out
