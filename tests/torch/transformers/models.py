"""Tiny models of the families the transformers tests run, built from configs (no weights
downloaded), in pairs: transformers' eager implementation, and the same weights on tokamax's
attention and experts.

Families: Mixtral (one KV head, a sliding window on every layer), Qwen3-MoE (q/k norms, grouped-
query attention, renormalised top-k), GPT-OSS (sinks, head_dim 64, alternating sliding-window and
full layers, transposed experts with biases). Windows are shorter than the test prompts, so the
window masks and the caches' window layers are exercised.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import ModuleType

import torch
import transformers

ATTENTION = "kernels-community/tokamax:attention"
VOCAB = 128


def _mixtral() -> transformers.PreTrainedConfig:
    return transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=1, head_dim=128, num_local_experts=4,
                                      num_experts_per_tok=2, max_position_embeddings=512, sliding_window=48,
                                      attention_dropout=0.0)


def _qwen3_moe() -> transformers.PreTrainedConfig:
    return transformers.Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=256,
                                       moe_intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=128, num_experts=4, num_experts_per_tok=2,
                                       norm_topk_prob=True, decoder_sparse_step=1, max_position_embeddings=512,
                                       attention_dropout=0.0)


def _gpt_oss() -> transformers.PreTrainedConfig:
    return transformers.GptOssConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=4,
                                     num_experts_per_tok=2, sliding_window=24, max_position_embeddings=512,
                                     layer_types=["sliding_attention", "full_attention"], attention_dropout=0.0)


FAMILIES: dict[str, tuple[Callable[[], transformers.PreTrainedConfig], type]] = {
    "mixtral": (_mixtral, transformers.MixtralForCausalLM),
    "qwen3_moe": (_qwen3_moe, transformers.Qwen3MoeForCausalLM),
    "gpt_oss": (_gpt_oss, transformers.GptOssForCausalLM),
}


def pair(family: str, tokamax: ModuleType, *, train: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(eager, tokamax) models of `family` with equal float32 weights; each has its own config, since
    the implementation choice lives on the config."""
    make_config, model_cls = FAMILIES[family]
    config = make_config()
    torch.manual_seed(0)
    eager = model_cls(copy.deepcopy(config)).float()
    ours = model_cls(copy.deepcopy(config)).float()
    ours.load_state_dict(eager.state_dict())
    eager.set_attn_implementation("eager")
    eager.set_experts_implementation("eager")
    ours.set_attn_implementation(ATTENTION)
    ours.set_experts_implementation(tokamax.register_experts())
    assert ours.config._attn_implementation == ATTENTION and eager.config._attn_implementation == "eager"
    return (eager.train(), ours.train()) if train else (eager.eval(), ours.eval())


def namespace(tokamax: ModuleType) -> str:
    """This build's custom-op namespace (for `ExportProbe`)."""
    import importlib

    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))
