"""Tiny models and request mixes for the continuous-batching tests (test_continuous_batching.py), built from
configs (random weights, float32), in pairs: transformers' `paged|eager` and the same weights on tokamax's
`flash_paged`.

Families: Llama with grouped-query attention (4 query heads on 2 KV heads, head_dim 32), Qwen2 (6 query heads on
2 KV heads, head_dim 16, biased q/k/v projections), Mistral (4 query heads on 1 KV head, head_dim 24, no sliding
window); with sliding windows: Mistral with a 20-token window (every layer sliding: transformers then keeps
every layer's cache as a ring), Mistral with `MistralConfig()`'s own window (4096), Gemma 2 (sliding and full
layers alternating, a 12-token window, soft-capped logits, query_pre_attn_scalar, head_dim 32), Qwen3 with
`layer_types` mixing a 10-token window and full layers (q/k norms). Head sizes below the kernel's 128 lanes on
purpose: its cache pads them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import transformers

FLASH_PAGED = "kernels-community/tokamax:flash_paged"
VOCAB = 128


def _llama() -> transformers.PreTrainedConfig:
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                    max_position_embeddings=256, attention_dropout=0.0)


def _qwen2() -> transformers.PreTrainedConfig:
    return transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                                    num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
                                    use_sliding_window=False, attention_dropout=0.0)


def _mistral(sliding_window: int | None = None) -> transformers.PreTrainedConfig:
    return transformers.MistralConfig(vocab_size=VOCAB, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=1, head_dim=24,
                                      max_position_embeddings=256, sliding_window=sliding_window,
                                      attention_dropout=0.0)


def _mistral_window() -> transformers.PreTrainedConfig:
    return _mistral(sliding_window=20)


def _mistral_default_window() -> transformers.PreTrainedConfig:
    return _mistral(sliding_window=transformers.MistralConfig().sliding_window)


def _gemma2() -> transformers.PreTrainedConfig:
    return transformers.Gemma2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=12,
                                     query_pre_attn_scalar=32, attn_logit_softcapping=50.0,
                                     max_position_embeddings=256, attention_dropout=0.0)


def _qwen3_mixed() -> transformers.PreTrainedConfig:
    return transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    use_sliding_window=True, sliding_window=10,
                                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                    max_position_embeddings=256, attention_dropout=0.0)


FAMILIES: dict[str, tuple[Callable[[], transformers.PreTrainedConfig], type]] = {
    "llama-gqa": (_llama, transformers.LlamaForCausalLM),
    "qwen2": (_qwen2, transformers.Qwen2ForCausalLM),
    "mistral": (_mistral, transformers.MistralForCausalLM),
    "mistral-window": (_mistral_window, transformers.MistralForCausalLM),
    "mistral-default-window": (_mistral_default_window, transformers.MistralForCausalLM),
    "gemma2": (_gemma2, transformers.Gemma2ForCausalLM),
    "qwen3-mixed": (_qwen3_mixed, transformers.Qwen3ForCausalLM),
}


def model(config: transformers.PreTrainedConfig, model_cls: type, attention: str) -> torch.nn.Module:
    """A float32 model of `config` (seed 0, so equal configs give equal weights) on `attention`."""
    torch.manual_seed(0)
    out = model_cls(copy.deepcopy(config)).float().eval()
    out.set_attn_implementation(attention)
    return out


def pair(family: str, reference: str = "paged|eager") -> tuple[torch.nn.Module, torch.nn.Module]:
    """(`reference`, flash_paged) models of `family` with equal weights."""
    make_config, model_cls = FAMILIES[family]
    config = make_config()
    eager, ours = model(config, model_cls, reference), model(config, model_cls, FLASH_PAGED)
    assert all(torch.equal(a, b) for a, b in zip(eager.state_dict().values(), ours.state_dict().values(),
                                                 strict=True))
    return eager, ours


def prompts(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


def blocks_needed(lengths: list[int], new_tokens: list[int], page_size: int) -> int:
    """Cache blocks all requests would hold at once if none were freed."""
    return sum(-(-(n + m) // page_size) for n, m in zip(lengths, new_tokens, strict=True))
