"""Training steps of tiny Mixtral, Qwen3-MoE and GPT-OSS models on tokamax attention and experts,
CPU tensors (interpret mode), against the same weights on transformers' eager implementation:
logits and every parameter's gradient of the loss, at lengths 1, 37, 129 and 200, a batch of 4 with
padding on either side, one attention kernel call per layer forward and one backward (counted at
the custom ops); packed sequences (position ids that restart) as eager reads them; DeepSeek-V3's
routed experts; `kernels.kernelize` of GPT-OSS's MoE block."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
import transformers

from tests.torch.export_probe import ExportProbe

from .models import FAMILIES, VOCAB, pair, tokens

# Both sides run float32 and differ in summation order only (the kernel's online softmax, grouped
# matmuls in tiles) through 2 layers: ~1e-5 relative on logits and gradients.
TOL = dict(rtol=1e-3, atol=1e-4)


def _namespace(tokamax) -> str:  # noqa: ANN001
    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


def _batch(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4 sequences of `length` tokens: unpadded, left-padded, right-padded, unpadded (length 1: none)."""
    ids, mask = tokens(4, length, seed=length), torch.ones(4, length, dtype=torch.int64)
    if length > 1:
        mask[1, : length // 3] = 0
        mask[2, length - length // 4:] = 0
    return ids, mask


def _labels(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Labels for the valid tokens predicted from valid tokens. transformers shifts labels, so with left
    padding the last pad position would predict the first real token; what a padding row computes is
    each implementation's own (eager averages every value for a row that sees no key, FA2 gives
    zeros, tokamax lets padding attend to padding), so that prediction is left out."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, 1:] = labels[:, 1:].masked_fill(mask[:, :-1] == 0, -100)
    return labels


def _loss_and_grads(model: torch.nn.Module, **inputs: torch.Tensor) -> tuple[torch.Tensor, dict]:
    out = model(**inputs)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads


def _assert_same(eager: tuple, ours: tuple, valid: torch.Tensor) -> None:
    (logits_e, grads_e), (logits_t, grads_t) = eager, ours
    torch.testing.assert_close(logits_t[valid], logits_e[valid], **TOL)
    assert grads_e.keys() == grads_t.keys() and grads_e
    for name in grads_e:
        torch.testing.assert_close(grads_t[name], grads_e[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("length", [1, 37, 129])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_step_matches_eager(tokamax, family, length):
    eager, ours = pair(family, tokamax, train=True)
    ids, mask = _batch(length)
    labels = _labels(ids, mask)
    reference = _loss_and_grads(eager, input_ids=ids, attention_mask=mask, labels=labels)
    with ExportProbe(_namespace(tokamax)) as probe:
        got = _loss_and_grads(ours, input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(reference, got, mask.bool())
    layers = ours.config.num_hidden_layers
    # the whole batch of 4 in one kernel call per layer, forward and backward
    assert probe.count("splash_attention") == layers and probe.count("splash_attention_bwd") == layers, probe.calls
    assert probe.count("gmm") >= 2 * layers  # tokamax's experts ran too


def test_packed_sequences_match_eager(tokamax):
    """No mask, position ids restarting at each document (transformers' packed format, e.g.
    DataCollatorWithFlattening): tokamax keeps attention within documents, as transformers' flash
    attention does, and as eager does without a cache (with one, eager ignores the packing)."""
    eager, ours = pair("qwen3_moe", tokamax, train=True)
    ids = tokens(2, 60, seed=3)
    position_ids = torch.cat([torch.arange(25), torch.arange(35)]).expand(2, 60)
    inputs = dict(input_ids=ids, position_ids=position_ids, labels=ids, use_cache=False)
    _assert_same(_loss_and_grads(eager, **inputs), _loss_and_grads(ours, **inputs), torch.ones(2, 60, dtype=torch.bool))


def test_deepseek_v3_experts_match_eager(tokamax):
    """DeepSeek-V3: a dense first layer, then routed experts (grouped top-k, shared expert) on tokamax's
    experts. Attention stays eager on both sides: its latent attention's value heads are narrower than
    its query/key heads (128 vs 192), which transformers' attention interface passes to no Hub kernel."""
    config = transformers.DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=256, moe_intermediate_size=128, num_hidden_layers=2,
        first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=64, q_lora_rank=None, qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128, max_position_embeddings=256, attention_dropout=0.0)
    torch.manual_seed(0)
    eager = transformers.DeepseekV3ForCausalLM(copy.deepcopy(config)).float()
    ours = transformers.DeepseekV3ForCausalLM(copy.deepcopy(config)).float()
    ours.load_state_dict(eager.state_dict())
    eager.set_experts_implementation("eager")
    ours.set_experts_implementation(tokamax.register_experts())
    ids, mask = _batch(37)
    labels = _labels(ids, mask)
    reference = _loss_and_grads(eager, input_ids=ids, attention_mask=mask, labels=labels)
    with ExportProbe(_namespace(tokamax)) as probe:
        got = _loss_and_grads(ours, input_ids=ids, attention_mask=mask, labels=labels)
    _assert_same(reference, got, mask.bool())
    assert probe.count("gmm") == 2 and probe.count("splash_attention") == 0, probe.calls  # one MoE layer


def test_kernelize_swaps_in_the_moe_layer_on_tpu(tokamax):
    """`kernels.kernelize(..., device="tpu")` with a mapping to this kernel's `layers.MegaBlocksMoeMLP`
    replaces GPT-OSS's MoE forward (device given explicitly: this host has no TPU to detect); the
    model then runs the ragged-dot op and gives the eager model's logits and gradients."""
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping

    from tests.conftest import VARIANT

    make_config, model_cls = FAMILIES["gpt_oss"]
    if getattr(transformers.models.gpt_oss.modeling_gpt_oss.GptOssMLP, "kernel_layer_name", None) is None:
        pytest.skip(f"transformers {transformers.__version__}: GPT-OSS's MLP names no hub kernel layer "
                    "(use_kernel_forward_from_hub was dropped in 5.25), so kernelize has nothing to replace; "
                    "its experts take experts_implementation (test_experts)")
    config = make_config()
    config.num_hidden_layers, config.layer_types = 1, ["full_attention"]
    torch.manual_seed(0)
    eager = model_cls(copy.deepcopy(config)).float().train()
    model = model_cls(copy.deepcopy(config)).float().train()
    model.load_state_dict(eager.state_dict())
    mapping = {"MegaBlocksMoeMLP": {"tpu": LocalLayerRepository(VARIANT, layer_name="MegaBlocksMoeMLP")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        model = kernelize(model, mode=Mode.TRAINING, device="tpu")
    mlp = model.model.layers[0].mlp
    assert mlp.forward.__qualname__ == "MegaBlocksMoeMLP.forward" and mlp.forward.__module__.endswith(".layers")
    ids = tokens(1, 128, seed=3)
    reference = _loss_and_grads(eager, input_ids=ids, labels=ids)
    with ExportProbe(_namespace(tokamax)) as probe:
        got = _loss_and_grads(model, input_ids=ids, labels=ids)
    assert probe.count("gmm") == 2, "the kernelized layer did not run the ragged-dot op"
    _assert_same(reference, got, torch.ones(1, 128, dtype=torch.bool))


def test_the_kernel_does_not_offer_a_varlen_function(tokamax):
    """transformers would take the CUDA varlen path for a kernel exporting this name."""
    assert not hasattr(tokamax, "flash_attn_varlen_func")
    assert tokamax.flash_attn_forward is tokamax.attention
