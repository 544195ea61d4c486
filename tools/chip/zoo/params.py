"""A model's parameter count from its config fields alone: what tests/chip/test_zoo.py holds against each model's
published size, so that a field written wrong (a head count, a width) shows as a count off by more than a few
percent. Norms, biases and rotary tables are left out (well under 1% of any model here)."""

from __future__ import annotations

from .models import Model


def attention(m: Model) -> int:
    """One layer's attention projections."""
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = h * m.num_attention_heads * qk if a.q_lora_rank is None else \
            h * a.q_lora_rank + a.q_lora_rank * m.num_attention_heads * qk
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + \
            a.kv_lora_rank * m.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + m.num_attention_heads * a.v_head_dim * h
    q = m.num_attention_heads * m.head_dim
    return 2 * h * q + 2 * h * m.num_key_value_heads * m.head_dim


def mlp(m: Model, dense: bool) -> int:
    """One layer's MLP (gated: three matrices), its experts, shared expert and router where it is a MoE layer."""
    h = m.hidden_size
    if dense or not m.moe:
        return 3 * h * m.intermediate_size
    return (m.num_experts * 3 * h * m.moe_intermediate_size + 3 * h * m.shared_expert_intermediate_size
            + h * m.num_experts)


def parameters(m: Model) -> int:
    """The whole model's (not a shard's): embeddings, the head where untied, every layer."""
    embeddings = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    layers = m.num_hidden_layers * attention(m) + m.dense_layers * mlp(m, True) + \
        (m.num_hidden_layers - m.dense_layers) * mlp(m, False)
    return embeddings + layers
