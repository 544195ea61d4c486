"""generate() modes that hand the attention several new tokens against a cache (a run-time query
offset with q_len > 1) or reorder the cache, on a tiny Llama (dense) and Gemma 2 (soft cap, window
layers) against eager: the same tokens for beam search, chunked prefill, prompt-lookup (assisted)
decoding and a continued conversation on the first call's cache."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

from tests.torch.export_probe import ExportProbe

from .models import ATTENTION, VOCAB, namespace, tokens


def _pair(model_cls: type, config: transformers.PreTrainedConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager, ours = model_cls(copy.deepcopy(config)).float().eval(), model_cls(copy.deepcopy(config)).float().eval()
    ours.load_state_dict(eager.state_dict())
    eager.set_attn_implementation("eager")
    ours.set_attn_implementation(ATTENTION)
    return eager, ours


def _llama() -> tuple[torch.nn.Module, torch.nn.Module]:
    return _pair(transformers.LlamaForCausalLM, transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512))


PROMPT = tokens(2, 37, seed=3)
MODES = {
    "beam-search-static": dict(num_beams=2, cache_implementation="static"),
    "prefill-chunks-dynamic": dict(prefill_chunk_size=16),
    "prefill-chunks-static": dict(prefill_chunk_size=16, cache_implementation="static"),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_generation_mode_matches_eager(tokamax, mode):
    eager, ours = _llama()
    want = eager.generate(input_ids=PROMPT, max_new_tokens=8, do_sample=False, **MODES[mode])
    with ExportProbe(namespace(tokamax)) as probe:
        got = ours.generate(input_ids=PROMPT, max_new_tokens=8, do_sample=False, **MODES[mode])
    assert torch.equal(got, want), (got[:, 37:], want[:, 37:])
    assert probe.attention_calls() >= 2 * 8  # every layer, every step on tokamax


def test_prompt_lookup_decoding_matches_eager(tokamax):
    """Assisted decoding: each step verifies up to 4 drafted tokens at once (q_len 1 to 5)."""
    eager, ours = _llama()
    prompt = torch.cat([PROMPT[:1], PROMPT[:1, :20]], 1)  # repeats, so drafts are found
    kwargs = dict(input_ids=prompt, max_new_tokens=12, do_sample=False, prompt_lookup_num_tokens=4)
    want = eager.generate(**kwargs)
    with ExportProbe(namespace(tokamax)) as probe:
        got = ours.generate(**kwargs)
    assert torch.equal(got, want)
    steps = [shape[2] for op, shape in probe.query_shapes if op == "splash_attention_cache"]
    assert max(steps) > 1, steps  # drafts were verified several tokens at a time


def test_a_continued_conversation_on_the_first_calls_cache_matches_eager(tokamax):
    eager, ours = _llama()
    results = []
    with ExportProbe(namespace(tokamax)) as probe:
        for model in (eager, ours):
            first = model.generate(input_ids=PROMPT, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
            more = torch.cat([first.sequences, tokens(2, 5, seed=9)], 1)
            results.append(model.generate(input_ids=more, past_key_values=first.past_key_values, max_new_tokens=4,
                                          do_sample=False))
    assert torch.equal(results[1], results[0])
    # the second call's 5 new tokens meet the first call's 41 cached ones: a run-time offset, 8 rows
    assert ("splash_attention_cache", (2, 4, 8, 64)) in probe.query_shapes, probe.query_shapes


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_gemma2_soft_cap_and_windows_match_eager(tokamax, cache):
    eager, ours = _pair(transformers.Gemma2ForCausalLM, transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, sliding_window=16, attn_logit_softcapping=30.0,
        final_logit_softcapping=None, max_position_embeddings=512))
    want = eager.generate(input_ids=PROMPT, max_new_tokens=8, do_sample=False, cache_implementation=cache)
    with ExportProbe(namespace(tokamax)) as probe:
        got = ours.generate(input_ids=PROMPT, max_new_tokens=8, do_sample=False, cache_implementation=cache)
    assert torch.equal(got, want)
    assert probe.attention_calls() == 2 * 8
