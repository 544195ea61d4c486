"""Named model shapes the chip benchmark runs at (from each model's published config)."""

from __future__ import annotations

from typing import NamedTuple


class Attention(NamedTuple):
    model: str
    heads: int
    kv_heads: int
    head_dim: int


class Experts(NamedTuple):
    """One expert projection: `rows` routed rows (tokens x top-k) of `hidden` -> `out` over `experts`."""

    model: str
    rows: int
    hidden: int
    out: int
    experts: int


class Head(NamedTuple):
    model: str
    rows: int
    hidden: int
    vocab: int


class Distill(NamedTuple):
    model: str
    rows: int
    student_hidden: int
    teacher_hidden: int
    vocab: int


ATTENTION = {
    "Llama 3 8B": Attention("Llama 3 8B", 32, 8, 128),  # Qwen3 8B has the same heads
    "Gemma 3 4B": Attention("Gemma 3 4B", 8, 4, 256),
}
ATTENTION_LENGTHS = (8192, 32768)
WINDOWS = {"Gemma 3 4B": 1024}  # sliding-window layers (config.json "sliding_window"): 5 of every 6 in Gemma 3

EXPERTS = (
    Experts("Mixtral 8x7B", 16384, 4096, 14336, 8),  # 8192 tokens, top-2: the gate (or up) projection
    Experts("OLMoE", 32768, 2048, 1024, 64),  # 4096 tokens, top-8
    Experts("Qwen3-30B-A3B", 65536, 2048, 768, 128),  # 8192 tokens, top-8
    Experts("gpt-oss-20b", 16384, 2880, 5760, 32),  # 4096 tokens, top-4: the fused gate-up projection
    Experts("DeepSeek-V3, one chip's 8 experts", 8192, 7168, 2048, 8),  # 256 experts over 32 chips
)

IMBALANCED = (  # routed rows spread unevenly over the experts (`ROUTING_SKEW`)
    Experts("Qwen3-235B-A22B, uneven routing", 65536, 4096, 1536, 128),  # 8192 tokens, top-8: gate (or up)
    Experts("gpt-oss-120b, uneven routing", 32768, 2880, 5760, 128),  # 8192 tokens, top-4: the fused gate-up
)
ROUTING_SKEW = 1.0
"""`IMBALANCED`'s experts take rows in proportion to exp(ROUTING_SKEW x N(0, 1)) (a log-normal load): at 65,536 rows
over 128 experts the busiest takes 4.7x the mean and the least 0.04x (seed 0)."""

HEADS = (
    Head("Llama 3 8B", 8192, 4096, 128256),
    Head("Qwen3 8B", 16384, 4096, 151936),
    Head("Gemma 3 4B", 8192, 2560, 262208),  # a vocabulary no block of 128 divides
)
UNLISTED = (  # the labels path at heads and row counts no other workload lists (rows left past the whole chunks)
    Head("Gemma 3 4B", 5000, 2560, 262208),
    Head("Gemma 2 2B", 3000, 2304, 256000),
    Head("Qwen3 1.7B", 4100, 2048, 151936),
    Head("Llama 3.2 1B", 1500, 2048, 128256),
)
STATISTICS = (  # TRL's fused head: where XLA's float32 logits fit the chip, and where they do not
    Head("Qwen3 8B", 2048, 4096, 151936),
    Head("Qwen3 8B", 8192, 4096, 151936),  # past the rows whose p fits an eighth of the v5e's HBM
    Head("Gemma 3 4B", 8192, 2560, 262208),
)
DISTILL = (Distill("Qwen3 1.7B from Qwen3 8B", 4096, 2048, 4096, 151936),)
DISTILL_LOSS = (  # the loss of a step (TRL's DistillationTrainer) past the rows whose Q fits an eighth of the v5e's HBM
    Distill("Qwen2.5 0.5B from Qwen2.5 7B", 8192, 896, 3584, 151936),
    Distill("Qwen2.5 0.5B from Qwen2.5 7B", 16384, 896, 3584, 151936),
    Distill("Qwen3 1.7B from Qwen3 8B", 4096, 2048, 4096, 151936),
)
