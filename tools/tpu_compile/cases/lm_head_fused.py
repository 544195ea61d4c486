"""The labels path's training loss with its gradients from the forward (`tokamax.lm_head.fused`,
`loss_and_grads` at the scheme it picks on each chip) at the LM-head issue's step: 16,384 tokens,
hidden 4096, bf16, Qwen's and Llama's vocabularies. Where it picks Liger's chunked scheme (`CHUNKED`: v7x
at both, with XLA adding dW: three vocabulary-sized XLA matmuls, no kernel, XLA's flop count says three; v5e at
both, each chunk of 1024 in `lm_head.streamed`'s two kernels with compact logits and dW in the pair, the
temporaries its own compiler assigns within an eighth of HBM), temporaries within its estimate as a compile-only
topology lays them out (`fused.temporaries`: the accumulator, two chunks' logits and dx's chunks; `fused.streamed_cost`:
one chunk's compact logits and the pair's low half); elsewhere (v6e, where the chunks that fit its estimate lose to
them) our three kernels. And Gemma 3 4B's head at the chip benchmark's 8,192 tokens (vocabulary 262,208, off the
lanes) on the v5e, in the streamed kernels too."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..case import Case, on_chips, spec
from . import _models as m

TOKENS, MODELS = 16384, (m.QWEN3_8B, m.LLAMA_3_8B)
CHUNKED = {("v5e", 128256): 2, ("v5e", 151936): 2, ("v7x", 128256): 0, ("v7x", 151936): 0, ("v5e", 262208): 2}
GEMMA_3_4B = m.Model("Gemma-3-4B", 2560, 262208, 8, 4, 256, 10240)
GEMMA_TOKENS = 8192
"""(chip, vocab) where `fused.choose_scheme` takes the chunked scheme at this step: the kernels it runs per part (2: the
streamed kernels; 1: dW added by `lm_head.accumulate`'s; the rows left after the whole chunks run them again)."""
_PICKED: dict[tuple[str, int], tuple[Any, Any]] = {}
"""(the scheme, its `fused.cost`) per (chip, vocab), noted when the case is built (it has the kernel)."""


def _build(chip: str, hidden: int, vocab: int, tokens: int = TOKENS) -> Any:
    def build(kernel: Any, mesh: Any) -> tuple[Any, list[jax.ShapeDtypeStruct]]:
        lm_head = kernel.lm_head
        with kernel.emulation.emulated_chip(chip):
            on = lm_head.cost.chip()
        scheme = lm_head.fused.choose_scheme(tokens, hidden, vocab, 2, on)
        # the compile-only topology's layout: the estimate without the chip's own (`fused.temporaries`)
        if scheme.streamed:
            acc_bytes = lm_head.streamed.accumulator_bytes(2, True, scheme.scaled)
            block = lm_head.streamed.block_for(scheme.chunk, hidden, vocab, 2, on.vmem, acc_bytes, compact=True)
            estimate = lm_head.fused.streamed_cost(tokens, hidden, vocab, 2, scheme.chunk, block, scheme.scaled)
        else:
            estimate = scheme.chunk and lm_head.fused.cost(tokens, hidden, vocab, 2, scheme.chunk, pair=scheme.pair,
                                                           kernel=scheme.kernel, scaled=scheme.scaled)
        _PICKED[chip, vocab] = (scheme, estimate, tokens)
        specs = [spec(mesh, (tokens, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
                 spec(mesh, (tokens,), jnp.int32), spec(mesh, (tokens,), jnp.float32)]

        def step(x: Any, w: Any, targets: Any, weights: Any) -> Any:
            return lm_head.fused.loss_and_grads(x, w, None, targets, weights, lm_head.IDENTITY)
        return step, specs
    return build


def _check(chip: str, vocab: int) -> Any:
    def check(outcome: Any) -> None:
        scheme, estimate, tokens = _PICKED[chip, vocab]
        chunk = scheme.chunk
        kernels, temp = outcome.hlo["tpu_custom_call"], outcome.memory["temp"]
        if (chip, vocab) not in CHUNKED:
            assert chunk is None and kernels == 3, f"{outcome.name}: {scheme}, {kernels} kernels; expected ours"
            return
        parts = 1 + bool(tokens % chunk and tokens > chunk)  # the scan's body, and the rows left's chunk
        per_part = 2 if scheme.streamed else int(scheme.kernel)
        assert chunk and kernels == CHUNKED[chip, vocab] * parts and CHUNKED[chip, vocab] == per_part, \
            f"{outcome.name}: {scheme}, {kernels} kernels; expected the chunked scheme"
        small = 64 << 20  # the per-row vectors and the compiler's small buffers, which the estimate leaves out
        assert temp <= estimate.temp_bytes + small, f"{outcome.name}: {temp / 2**30:.3f} GiB of temporaries over " \
                                                    f"the estimate {estimate.temp_bytes / 2**30:.3f} GiB"
        # three matmuls: XLA's own count, which takes the scan's body once (one chunk) and the rows left once; its
        # elementwise ops add tens of flops per logit against the matmuls' 6 x hidden (about 0.3% at hidden 2560)
        per_chunk = estimate.flops * outcome_rows(tokens, chunk) // computed_rows(tokens, chunk)
        assert per_chunk <= outcome.cost["flops"] <= 1.005 * per_chunk, \
            f"{outcome.name}: {outcome.cost['flops']:.4g} flops per chunk, three matmuls are {per_chunk:.4g}"
    return check


def computed_rows(tokens: int, chunk: int) -> int:
    """The rows the scheme computes: the whole chunks and the rows left padded (`fused.chunk_rows`)."""
    whole, left = divmod(tokens, chunk)
    return whole * chunk + -(-left // 16) * 16


def outcome_rows(tokens: int, chunk: int) -> int:
    """The rows XLA's flop count takes: the scan's body once, and the rows left's chunk."""
    whole, left = divmod(tokens, chunk)
    return (chunk if whole else 0) + -(-left // 16) * 16


def cases() -> list[Case]:
    out = [Case(f"lm_head_fused/step-{GEMMA_TOKENS}/{GEMMA_3_4B.name}/h{GEMMA_3_4B.hidden}-v{GEMMA_3_4B.vocab}/"
                "loss+grads", "lm_head_fused", GEMMA_3_4B.name, "v5e",
                _build("v5e", GEMMA_3_4B.hidden, GEMMA_3_4B.vocab, GEMMA_TOKENS), check=_check("v5e", GEMMA_3_4B.vocab),
                xla_only=True)]
    for model in MODELS:
        out += on_chips(lambda chip, model=model: Case(
            f"lm_head_fused/step-{TOKENS}/{model.name}/h{model.hidden}-v{model.vocab}/loss+grads", "lm_head_fused",
            model.name, chip, _build(chip, model.hidden, model.vocab),
            tier="default" if model is m.QWEN3_8B else "all", check=_check(chip, model.vocab), xla_only=True))
    return out
