"""Tiny stand-ins for the Hub models the docs' snippets load, saved from configs (no download).

A snippet writes `name = "allenai/OLMoE-1B-7B-0924"` and `from_pretrained(name, ...)`; the snippet test
replaces that id with the directory of a tiny checkpoint of the same architecture: random weights
from a config, and a byte-level tokenizer (every byte one token, no merges) that reads any text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from tools.torch_chip.tokenizer import byte_tokenizer  # noqa: F401  (the tests import it from here too)


def _olmoe() -> transformers.PreTrainedModel:
    config = transformers.OlmoeConfig(vocab_size=260, hidden_size=256, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, num_experts=4,
                                      num_experts_per_tok=2, max_position_embeddings=512, pad_token_id=1,
                                      eos_token_id=0, bos_token_id=None)
    config.architectures = ["OlmoeForCausalLM"]
    return transformers.OlmoeForCausalLM(config)


# Hub id -> a tiny model of its architecture. A snippet naming another id fails until it is added here.
MODELS: dict[str, Callable[[], transformers.PreTrainedModel]] = {
    "allenai/OLMoE-1B-7B-0924": _olmoe,
}


def save_checkpoint(model_id: str, directory: Path) -> Path:
    """Writes the tiny stand-in of `model_id` (weights, config, tokenizer) to `directory`; returns it."""
    torch.manual_seed(0)
    model = MODELS[model_id]()
    model.save_pretrained(directory)
    tokenizer = byte_tokenizer()
    assert len(tokenizer) <= model.config.vocab_size
    tokenizer.save_pretrained(directory)
    return directory


if __name__ == "__main__":  # python -m tests.torch.doc_models MODEL_ID DIR: a stand-in to run a snippet by hand
    import sys

    print(save_checkpoint(sys.argv[1], Path(sys.argv[2])))
