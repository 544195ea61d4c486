"""The steps benchmarked: each a slice of a published model (its layers' shapes from its config.json, as many layers
as one v5e holds with their weights' gradients, and its whole LM head) at a number of tokens, one sequence."""

from __future__ import annotations

from typing import NamedTuple


class Model(NamedTuple):
    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the dense MLP's (0: a MoE layer)
    vocab: int
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    window: int | None = None  # the sliding window of the local layers
    local_per_global: int = 0  # local (windowed) layers before each global one
    gelu: bool = False  # GeGLU (Gemma) rather than SwiGLU
    qk_norm: bool = False  # RMSNorm on each head's q and k (Qwen3, Gemma 3)
    sandwich: bool = False  # a norm after each block as well as before (Gemma)


class Step(NamedTuple):
    model: Model
    tokens: int
    layers: int
    remat: bool = False  # each layer's activations recomputed in the backward (the long sequences')

    @property
    def case(self) -> str:
        m = self.model
        kind = (f"{m.experts} experts top-{m.top_k}, router skewed" if m.experts else
                f"{m.local_per_global} windowed ({m.window}) per global layer" if m.window else "dense")
        remat = ", layers rematerialized" if self.remat else ""
        return (f"{m.name}: {self.layers} layer{'s' * (self.layers > 1)} ({kind}, heads {m.heads}/{m.kv_heads} of "
                f"{m.head_dim}) and its {m.vocab} head, {self.tokens} tokens{remat}")

    def window_of(self, layer: int) -> int | None:
        """Layer `layer`'s window: Gemma 3's pattern, `local_per_global` windowed layers then a global one."""
        m = self.model
        return m.window if m.window and (layer + 1) % (m.local_per_global + 1) else None


LLAMA_3_8B = Model("Llama 3 8B", 4096, 32, 8, 128, 14336, 128256)
QWEN3_30B_A3B = Model("Qwen3-30B-A3B", 2048, 32, 4, 128, 0, 151936, experts=128, top_k=8, expert_intermediate=768,
                      qk_norm=True)
GEMMA_3_4B = Model("Gemma 3 4B", 2560, 8, 4, 256, 10240, 262208, window=1024, local_per_global=5, gelu=True,
                   qk_norm=True, sandwich=True)

ROUTER_SKEW = 0.5
"""The MoE router's logits get a fixed per-expert bias drawn from N(0, ROUTER_SKEW^2): a router that favours some
experts, as a trained one does before (or without) load balancing. Its groups are uneven: at 8,192 tokens (top-8 of
128) the busiest expert takes 5.2x the mean and the least 0.04x (numpy, the same draws)."""

STEPS = (
    *(Step(LLAMA_3_8B, t, 1) for t in (4096, 8192, 16384, 32768)),
    *(Step(QWEN3_30B_A3B, t, 1) for t in (4096, 8192, 16384, 32768)),
    Step(GEMMA_3_4B, 4096, 6), Step(GEMMA_3_4B, 8192, 6, remat=True), Step(GEMMA_3_4B, 16384, 6, remat=True),
    Step(GEMMA_3_4B, 32768, 6, remat=True),
)
MATERIALIZED_TOKENS = 8192
"""Up to these tokens the baseline's head is also run with its float32 [tokens, vocab] logits materialized (what
XLA's plain loss does, fastest where it fits); past them only chunked over rows and rematerialized (each chunk's
logits recomputed in the backward: MaxText's vocabulary tiling), as they would not fit the chip beside the layers."""


def attention_pairs(tokens: int, window: int | None) -> float:
    """(query, key) pairs a causal layer attends over, within `window` where it has one."""
    if window is None or window >= tokens:
        return tokens * (tokens + 1) / 2
    return tokens * window - window * (window - 1) / 2


def matmul_params(m: Model) -> int:
    """Weights a token multiplies by in one layer (the active experts' only, and the router)."""
    attention = m.hidden * m.head_dim * (2 * m.heads + 2 * m.kv_heads)
    mlp = 3 * m.hidden * (m.top_k * m.expert_intermediate + m.experts if m.experts else m.intermediate)
    return attention + mlp


def flops(step: Step) -> float:
    """The step's model flops, forward and backward: 6 per weight a token multiplies by (its layers' and the head's),
    and attention's 3 x 4 per (pair, head, dimension); a rematerialized layer's second forward not counted."""
    m = step.model
    weights = step.layers * matmul_params(m) + m.hidden * m.vocab
    attention = sum(12 * attention_pairs(step.tokens, step.window_of(i)) * m.heads * m.head_dim
                    for i in range(step.layers))
    return 6.0 * step.tokens * weights + attention
