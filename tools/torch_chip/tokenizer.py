"""A tokenizer with no Hub behind it, for models built from configs: every byte one token (ids 2-257), <eos> 0,
<pad> 1, so a model needs a vocabulary of >= 258. Used by the chip's TRL runs and by the tests' tiny checkpoints."""

from __future__ import annotations

from typing import Any


def byte_tokenizer() -> Any:
    """transformers' fast tokenizer over a byte-level BPE with no merges (built from its parts)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<eos>": 0, "<pad>": 1, **{c: i + 2 for i, c in enumerate(alphabet)}}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<pad>")
