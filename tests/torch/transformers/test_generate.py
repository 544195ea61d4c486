"""Greedy `generate()` of tiny Mixtral, Qwen3-MoE and GPT-OSS models on tokamax attention and
experts (CPU tensors, interpret mode) against the same weights on eager attention: the same tokens
and per-step logits, with the dynamic and the static cache, for an unpadded batch and a left-padded
batch of three prompts of different lengths; and the exports torch-tpu would make (counted with its
own invocation keys): a static cache's once for the prompt and once for the steps, however many
tokens; a dynamic cache's once per KV-length bucket."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.torch.export_probe import ExportProbe

from .models import FAMILIES, pair, tokens

NEW_TOKENS = 10
# float32 on both sides through 2 layers, summation order only: ~1e-6 on logits of order 1.
LOGIT_TOL = dict(rtol=1e-3, atol=1e-4)


def _namespace(tokamax) -> str:  # noqa: ANN001
    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


def _prompts(padded: bool) -> dict[str, torch.Tensor]:
    if not padded:
        return dict(input_ids=tokens(2, 37, seed=5))
    lengths = (37, 29, 12)
    ids, mask = tokens(3, 37, seed=6), torch.zeros(3, 37, dtype=torch.int64)
    for row, n in enumerate(lengths):  # left padding, as decoder-only generation uses
        mask[row, 37 - n:] = 1
    return dict(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask)


def _generate(model: torch.nn.Module, cache: str, new_tokens: int = NEW_TOKENS, **prompt: torch.Tensor):  # noqa: ANN202
    return model.generate(**prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                          cache_implementation=cache, pad_token_id=0, output_logits=True,
                          return_dict_in_generate=True)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_generation_matches_eager(tokamax, family, cache, padded):
    eager, ours = pair(family, tokamax, train=False)
    prompt = _prompts(padded)
    want = _generate(eager, cache, **prompt)
    with ExportProbe(_namespace(tokamax)) as probe:
        got = _generate(ours, cache, **prompt)
    assert torch.equal(got.sequences, want.sequences), (got.sequences[:, 37:], want.sequences[:, 37:])
    assert len(got.logits) == NEW_TOKENS
    for step, (g, w) in enumerate(zip(got.logits, want.logits, strict=True)):
        torch.testing.assert_close(g, w, **LOGIT_TOL, msg=lambda m, s=step: f"step {s}: {m}")
    assert probe.attention_calls() == \
        ours.config.num_hidden_layers * NEW_TOKENS, probe.calls  # every layer, every step ran the kernel


def _exports(tokamax, model: torch.nn.Module, cache: str, new_tokens: int, prompt_len: int) -> dict[str, int]:  # noqa: ANN001
    """The attention ops' exports of one generate() call (the experts' grouped matmuls export once per
    token count: the prompt's and a step's)."""
    with ExportProbe(_namespace(tokamax)) as probe, torch.no_grad():
        _generate(model, cache, new_tokens, input_ids=tokens(1, prompt_len, seed=prompt_len))
    return {op: n for op, n in probe.exports().items() if op.startswith("splash")}


def test_static_cache_exports_once_for_the_prompt_and_once_for_the_steps(tokamax):
    """Qwen3-MoE (two full-attention layers), a 37-token prompt: 4 or 24 new tokens, the same two
    exports (the prompt against the cache, then every step)."""
    _, ours = pair("qwen3_moe", tokamax, train=False)
    for new_tokens in (4, 24):
        assert _exports(tokamax, ours, "static", new_tokens, 37) == {"splash_attention_cache": 2}


def test_static_cache_with_window_layers_exports_once_per_layer_kind(tokamax):
    """GPT-OSS: its window layers' static cache holds the last 24 tokens. The 37-token prompt fills it
    past the window (transformers hands over the prompt itself: self-attention), the full layers see
    the prompt against the cache; then one export per layer kind for every step."""
    _, ours = pair("gpt_oss", tokamax, train=False)
    for new_tokens in (4, 24):
        assert _exports(tokamax, ours, "static", new_tokens, 37) == {"splash_attention": 1,
                                                                    "splash_attention_cache": 3}


def test_prompts_of_one_bucket_share_their_exports(tokamax):
    """Prompts of 37 and 90 tokens run padded to 128 (dynamic cache: self-attention; static cache: the
    prompt against the cache, 64 and 128 queries), steps of one token: the second prompt exports
    nothing new with the dynamic cache."""
    _, ours = pair("qwen3_moe", tokamax, train=False)
    with ExportProbe(_namespace(tokamax)) as probe, torch.no_grad():
        for length in (37, 90):
            _generate(ours, "dynamic", 4, input_ids=tokens(1, length, seed=length))
    assert {op: n for op, n in probe.exports().items() if op.startswith("splash")} == {
        "splash_attention": 1, "splash_attention_cache": 1}


def test_dynamic_cache_exports_once_per_kv_bucket(tokamax):
    """Qwen3-MoE, dynamic cache: the 120-token prompt is one self-attention export; its steps see 121 to
    135 keys, which fall in two buckets (128 and 256 slots): two step exports, not 15."""
    _, ours = pair("qwen3_moe", tokamax, train=False)
    assert _exports(tokamax, ours, "dynamic", 16, 120) == {"splash_attention": 1, "splash_attention_cache": 2}
