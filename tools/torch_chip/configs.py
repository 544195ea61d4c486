"""The models the training steps run, from their published config.json (the few fields that set the shapes, copied
with the model's name; random weights, no download), cut to a few layers so that the weights, their gradients and
AdamW's two moments fit one v5e (15.7 GiB), and their model FLOPs per step (what MFU divides)."""

from __future__ import annotations

import dataclasses
from typing import Any

# name: (published model, transformers config class, fields, layers on the chip). Layers: the full vocabulary's
# embedding and head with AdamW cost 8 bytes a parameter (bf16 weight, gradient, two moments): Llama 3 8B's two
# 128,256 x 4,096 matrices take 8.4 GB before a layer (1.75 GB each), OLMoE's 1.6 GB (3.4 GB a layer: 64 experts),
# Gemma 3 4B's tied 262,208 x 2,560 one 5.4 GB (0.75 GB a layer). Gemma 3 at 3 layers: with the kernel, 4 to 6 ran
# out of HBM at 4,096 tokens on libtpu 0.0.52 (peaks 15.9-16.9 GB) and 3 ran (15.1 GiB); its 3 layers are all
# sliding-window ones (the global layer is every 6th).
PUBLISHED: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "llama3_8b": ("meta-llama/Meta-Llama-3-8B", "LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192,
        tie_word_embeddings=False), 2),
    "olmoe_1b_7b": ("allenai/OLMoE-1B-7B-0924", "OlmoeConfig", dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_attention_heads=16, num_key_value_heads=16,
        num_experts=64, num_experts_per_tok=8, norm_topk_prob=False, rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=4096, tie_word_embeddings=False, router_aux_loss_coef=0.01,
        output_router_logits=False), 3),
    "gemma3_4b": ("google/gemma-3-4b-pt (text)", "Gemma3TextConfig", dict(
        vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_attention_heads=8, num_key_value_heads=4,
        head_dim=256, query_pre_attn_scalar=256, sliding_window=1024, sliding_window_pattern=6,
        rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=131072, tie_word_embeddings=True,
        final_logit_softcapping=None, attn_logit_softcapping=None), 3),
}

# --tiny: the same architectures at sizes a CPU runs in Pallas interpret mode
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
            head_dim=128, bos_token_id=None, eos_token_id=None, pad_token_id=None)
TINY_EXTRA = {"olmoe_1b_7b": dict(hidden_size=256, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2),
              "gemma3_4b": dict(head_dim=256, query_pre_attn_scalar=256, sliding_window=32, sliding_window_pattern=2)}
TINY_LAYERS = 2


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    published: str
    config: Any  # a transformers PreTrainedConfig
    layers: int


def model(name: str, *, tiny: bool, layers: int | None = None, tokens: int = 4096) -> Model:
    """`name`'s config at `layers` (the table's by default), room for `tokens` positions."""
    import transformers

    published, cls, fields, chip_layers = PUBLISHED[name]
    fields = dict(fields)
    if tiny:
        fields.update(TINY)
        fields.update(TINY_EXTRA.get(name, {}))
    if cls == "OlmoeConfig":  # head_dim is hidden_size / heads there
        fields.pop("head_dim", None)
    layers = layers or (TINY_LAYERS if tiny else chip_layers)
    fields["max_position_embeddings"] = max(fields["max_position_embeddings"], tokens)
    pattern = fields.pop("sliding_window_pattern", None)
    if pattern:  # transformers 5 takes the pattern as layer types: pattern - 1 local layers, then a global one
        fields["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                                 for i in range(layers)]
    config = getattr(transformers, cls)(num_hidden_layers=layers, attention_dropout=0.0, **fields)
    return Model(name, published, config, layers)


def _attention_pairs(tokens: int, window: int | None) -> float:
    """Query-key pairs a causal (windowed) layer computes over `tokens`."""
    if not window or window >= tokens:
        return tokens * (tokens + 1) / 2
    return window * (window + 1) / 2 + (tokens - window) * window


def step_flops(config: Any, tokens: int) -> float:
    """Model FLOPs of one training step (forward and backward: 3x the forward's 2 per multiply-add) over `tokens`
    tokens: the matmuls of the weights each token uses (the active experts and the router for a MoE, the head,
    not the embedding lookup) and causal attention's two matmuls over the pairs each layer computes."""
    h, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or h // heads
    attn_weights = h * heads * d * 2 + h * kv * d * 2
    experts = getattr(config, "num_experts", None)
    if experts:
        mlp = config.num_experts_per_tok * 3 * h * config.intermediate_size + h * experts
    else:
        mlp = 3 * h * config.intermediate_size
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    pairs = sum(_attention_pairs(tokens, window if t == "sliding_attention" else None) for t in layer_types)
    weights = config.num_hidden_layers * (attn_weights + mlp) + h * config.vocab_size
    return 6.0 * weights * tokens + 3 * 4.0 * heads * d * pairs
