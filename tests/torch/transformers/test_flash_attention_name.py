"""One attention name for a model that is trained and sampled from (`kernels-community/tokamax:flash_attention`,
what TRL's GRPO with continuous-batching rollouts needs): on a tiny Llama (grouped-query attention), a training
step's loss and every gradient equal `:attention`'s, greedy `generate()` the same tokens, and `generate_batch`
(continuous batching, which takes only names with "flash" in them) the same tokens as `:flash_paged`, with
batched RPA in every layer of every continuous-batching forward; `:attention` itself is refused by continuous
batching, naming the implementation."""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from tests.torch.export_probe import ExportProbe

from . import cb_models
from .cb_batches import Batches, Layer
from .models import ATTENTION

FLASH = "kernels-community/tokamax:flash_attention"
CB = dict(block_size=16, num_blocks=24, max_batch_tokens=32, max_memory_percent=None)


def _llama(attention: str) -> torch.nn.Module:
    config, model_cls = cb_models.FAMILIES["llama-gqa"]
    return cb_models.model(config(), model_cls, attention)


def test_training_and_generate_equal_the_attention_name(tokamax):
    ids = torch.tensor(cb_models.prompts([29, 29], seed=3))
    results = {}
    for name in (ATTENTION, FLASH):
        model = _llama(name).train()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.eval()
        tokens = model.generate(input_ids=ids[:1, :11], max_new_tokens=5, do_sample=False, pad_token_id=0)
        results[name] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()}, tokens)
    (loss_a, grads_a, tokens_a), (loss_f, grads_f, tokens_f) = results[ATTENTION], results[FLASH]
    torch.testing.assert_close(loss_f, loss_a, rtol=0, atol=0)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_f[name], grad, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    assert torch.equal(tokens_f, tokens_a)


def test_generate_batch_equals_flash_paged_and_runs_batched_rpa(tokamax):
    namespace = importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME
    inputs = cb_models.prompts([3, 17, 9], seed=4)
    gen = GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0)
    outputs = {}
    for name in ("kernels-community/tokamax:flash_paged", FLASH):
        model = _llama(name)
        probe, forwards, forward = ExportProbe(namespace), [0], model.forward

        def probed(*args, _forward=forward, _probe=probe, _forwards=forwards, **kwargs):  # noqa: ANN002, ANN003, ANN202
            _forwards[0] += 1
            with _probe:
                return _forward(*args, **kwargs)

        model.forward = probed
        results = model.generate_batch(inputs, generation_config=gen,
                                       continuous_batching_config=ContinuousBatchingConfig(**CB))
        assert all(r.error is None for r in results.values())
        outputs[name] = {rid: r.generated_tokens for rid, r in results.items()}
        assert forwards[0] and probe.count("batched_rpa") == model.config.num_hidden_layers * forwards[0]
        assert probe.count("splash_attention") == 0
    assert outputs[FLASH] == outputs["kernels-community/tokamax:flash_paged"]


def test_continuous_batching_refuses_the_attention_name(tokamax):
    model = _llama(ATTENTION)
    with pytest.raises(ValueError, match="tokamax:attention is not supported for continuous batching"):
        model.generate_batch(cb_models.prompts([3], seed=5),
                             generation_config=GenerationConfig(max_new_tokens=2, do_sample=False, pad_token_id=0))


@pytest.mark.kernels_ci
def test_a_batching_call_without_its_cache_is_refused_not_run_on_splash(tokamax):
    """A continuous-batching call (its slot indices) that comes without the PagedAttentionCache (transformers >= 5.24
    when the cache is not handed on) is refused naming the transformers version, rather than run on splash, which
    with no mask would attend across the packed sequences."""
    config = cb_models.FAMILIES["llama-gqa"][0]()
    kwargs = Batches(config, 4, 16).step([("a", 3), ("b", 2)])
    del kwargs["cache"]
    q, k = torch.zeros(1, 4, 5, 32), torch.zeros(1, 2, 5, 32)
    with pytest.raises(NotImplementedError, match="without its PagedAttentionCache") as info:
        tokamax.flash_attention(Layer(0), q, k, k, None, **kwargs)
    assert str(info.value).startswith("tokamax flash_paged: transformers ")
