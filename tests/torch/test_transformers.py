"""transformers on these kernels, on CPU tensors (interpret mode), against transformers' eager code.

- the attention function (`attn_implementation="kernels-community/tokamax:attention"`) against a
  float64 softmax attention written here: GQA, causal, sliding window, padding, soft cap, sinks;
- tiny Mixtral, GPT-OSS and Qwen3-MoE models built from configs (no weights downloaded): logits and
  `loss.backward()` gradients with tokamax attention and experts equal the eager model's, for a
  batch with padding and (GPT-OSS) sliding-window layers; a tiny DeepSeek-V3 with tokamax experts
  (its latent attention stays eager).
"""

from __future__ import annotations

import copy
import types

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Torch tier installs transformers; this tier has none")


def _randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _reference(q, k, v, allowed, scaling, cap=None, sinks=None):  # noqa: ANN001, ANN202
    """[B, H, S, D] float64 attention; allowed [B, S, S]; GQA by repeating kv heads; sinks per head."""
    q, k, v = (x.double() for x in (q, k, v))
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k) * scaling
    if cap:
        logits = cap * torch.tanh(logits / cap)
    logits = logits.masked_fill(~allowed[:, None], float("-inf"))
    if sinks is not None:
        sink = sinks.double()[None, :, None, None].expand(*logits.shape[:3], 1)
        probs = torch.cat([logits, sink], -1).softmax(-1)[..., :-1]
    else:
        probs = logits.softmax(-1)
    return torch.einsum("bhqk,bhkd->bqhd", probs, v)


@pytest.mark.parametrize(("window", "cap", "with_sinks"), [(None, None, False), (48, None, False), (None, 20.0, True)],
                         ids=["causal", "sliding-window", "softcap-sinks"])
def test_attention_function_matches_a_float64_reference(tokamax, window, cap, with_sinks):
    batch, heads, kv_heads, length, dim = 2, 4, 2, 128, 128
    q = _randn(batch, heads, length, dim, seed=1).requires_grad_()
    k = _randn(batch, kv_heads, length, dim, seed=2).requires_grad_()
    v = _randn(batch, kv_heads, length, dim, seed=3).requires_grad_()
    sinks = _randn(heads, seed=4).requires_grad_() if with_sinks else None
    padding = torch.ones(batch, length, dtype=torch.int64)
    padding[1, 100:] = 0  # the second sequence is 100 tokens, right-padded
    module = types.SimpleNamespace(is_causal=True)
    out, weights = tokamax.attention(module, q, k, v, padding, scaling=dim**-0.5, sliding_window=window,
                                     softcap=cap, s_aux=sinks)
    assert weights is None and out.shape == (batch, length, heads, dim)

    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    allowed = (j <= i) & ((i - j < window) if window else True)
    valid = padding.bool()
    allowed = allowed[None] & (valid[:, :, None] == valid[:, None, :])  # padding only with padding
    ref = _reference(q, k, v, allowed, dim**-0.5, cap, sinks)
    cotangent = _randn(*out.shape, seed=5) * valid[:, :, None, None]  # padded rows carry no gradient
    (out * cotangent).sum().backward()
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    sinks64 = sinks.detach().double().requires_grad_() if with_sinks else None
    (_reference(*leaves, allowed, dim**-0.5, cap, sinks64) * cotangent.double()).sum().backward()
    # f32 inputs, f32 online softmax in the kernel: summation order and exp rounding only.
    tol = dict(rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(out.double()[valid], ref.detach()[valid], **tol)
    for got, want in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got.double(), want.grad, **tol)
    if with_sinks:
        torch.testing.assert_close(sinks.grad.double(), sinks64.grad, **tol)


def _batch(vocab: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(7))
    mask = torch.ones(2, length, dtype=torch.int64)
    mask[1, 96:] = 0  # right padding in the second sequence
    return ids, mask


def _compare(model_cls, config, tokamax, tol: dict, monkeypatch, attention: bool = True) -> None:  # noqa: ANN001
    """Eager against tokamax experts (and, with `attention`, tokamax attention): logits on the valid tokens
    and every parameter's gradient of the loss; counts that the kernels' Torch ops ran."""
    name = tokamax.register_experts()
    calls = {"gmm": 0, "splash_attention": 0}
    for op in calls:  # count that the tokamax model really runs the kernels' Torch ops
        original = getattr(tokamax.torch_ops, op)

        def counted(*args, op=op, original=original, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[op] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(tokamax.torch_ops, op, counted)
    torch.manual_seed(0)
    # each model its own config: the implementation choice lives on the config
    eager = model_cls(copy.deepcopy(config)).float().eval()
    ours = model_cls(copy.deepcopy(config)).float().eval()
    ours.load_state_dict(eager.state_dict())
    eager.set_attn_implementation("eager")
    eager.set_experts_implementation("eager")
    ours.set_attn_implementation("kernels-community/tokamax:attention" if attention else "eager")
    ours.set_experts_implementation(name)
    ids, mask = _batch(config.vocab_size, 128)
    labels = ids.masked_fill(mask == 0, -100)
    outputs = {}
    for label, model in (("eager", eager), ("tokamax", ours)):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        outputs[label] = (out.logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()
                                                if p.grad is not None})
    assert ours.config._attn_implementation == ("kernels-community/tokamax:attention" if attention else "eager")
    assert eager.config._attn_implementation == "eager" and eager.config._experts_implementation == "eager"
    layers = config.num_hidden_layers
    moe_layers = layers - getattr(config, "first_k_dense_replace", 0)
    # 2 sequences per attention layer; 2 projections per MoE layer
    assert calls == {"gmm": 2 * moe_layers, "splash_attention": 2 * layers if attention else 0}, calls
    (logits_e, grads_e), (logits_t, grads_t) = outputs["eager"], outputs["tokamax"]
    valid = mask.bool()
    torch.testing.assert_close(logits_t[valid], logits_e[valid], **tol)
    assert grads_e.keys() == grads_t.keys() and grads_e
    for n in grads_e:
        torch.testing.assert_close(grads_t[n], grads_e[n], **tol, msg=lambda m, n=n: f"{n}: {m}")


# Both sides run f32; they differ in summation order (online softmax, grouped matmuls in tiles)
# through 2 layers: ~1e-5 relative on logits and gradients.
MODEL_TOL = dict(rtol=1e-3, atol=1e-4)


def test_tiny_mixtral_matches_eager(tokamax, monkeypatch):
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=128, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=128, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=256, sliding_window=None,
                           attention_dropout=0.0)
    _compare(MixtralForCausalLM, config, tokamax, MODEL_TOL, monkeypatch)


def test_tiny_gpt_oss_matches_eager(tokamax, monkeypatch):
    """Sinks, alternating sliding-window and full layers, transposed experts with biases."""
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(vocab_size=128, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=128, num_local_experts=4,
                          num_experts_per_tok=2, sliding_window=64, max_position_embeddings=256,
                          layer_types=["sliding_attention", "full_attention"], attention_dropout=0.0)
    _compare(GptOssForCausalLM, config, tokamax, MODEL_TOL, monkeypatch)


def test_tiny_qwen3_moe_matches_eager(tokamax, monkeypatch):
    """Qwen3-MoE: q/k norms, top-k routing with renormalised weights, every layer sparse."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(vocab_size=128, hidden_size=256, intermediate_size=256, moe_intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                            num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                            max_position_embeddings=256, attention_dropout=0.0)
    _compare(Qwen3MoeForCausalLM, config, tokamax, MODEL_TOL, monkeypatch)


def test_tiny_deepseek_v3_experts_match_eager(tokamax, monkeypatch):
    """DeepSeek-V3: a dense first layer, then routed experts (grouped top-k, shared expert) on tokamax's
    experts. Attention stays eager on both sides: its multi-head latent attention has value heads
    narrower than query/key heads (128 vs 192), which splash attention does not take."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(vocab_size=128, hidden_size=256, intermediate_size=256, moe_intermediate_size=128,
                              num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2,
                              num_key_value_heads=2, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                              n_group=2, topk_group=1, kv_lora_rank=64, q_lora_rank=None, qk_rope_head_dim=64,
                              qk_nope_head_dim=128, v_head_dim=128, max_position_embeddings=256,
                              attention_dropout=0.0)
    _compare(DeepseekV3ForCausalLM, config, tokamax, MODEL_TOL, monkeypatch, attention=False)


def test_the_kernel_does_not_offer_a_varlen_function(tokamax):
    """transformers would take the CUDA varlen path for a kernel exporting this name."""
    assert not hasattr(tokamax, "flash_attn_varlen_func")


def test_kernelize_swaps_in_the_moe_layer_on_tpu(tokamax, monkeypatch):
    """`kernels.kernelize(..., device="tpu")` with a mapping to this kernel's `layers.MegaBlocksMoeMLP`
    replaces GPT-OSS's MoE forward (device given explicitly: this host has no TPU to detect); the
    model then runs the ragged-dot op and gives the eager model's logits and gradients."""
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping
    from transformers import GptOssConfig, GptOssForCausalLM

    from tests.conftest import VARIANT

    config = GptOssConfig(vocab_size=128, hidden_size=256, intermediate_size=128, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=128, num_local_experts=4,
                          num_experts_per_tok=2, layer_types=["full_attention"], attention_dropout=0.0)
    torch.manual_seed(0)
    eager = GptOssForCausalLM(copy.deepcopy(config)).float().train()
    model = GptOssForCausalLM(copy.deepcopy(config)).float().train()
    model.load_state_dict(eager.state_dict())
    mapping = {"MegaBlocksMoeMLP": {"tpu": LocalLayerRepository(VARIANT, layer_name="MegaBlocksMoeMLP")}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        model = kernelize(model, mode=Mode.TRAINING, device="tpu")
    mlp = model.model.layers[0].mlp
    assert mlp.forward.__qualname__ == "MegaBlocksMoeMLP.forward" and mlp.forward.__module__.endswith(".layers")

    calls = []
    original = tokamax.torch_ops.gmm
    monkeypatch.setattr(tokamax.torch_ops, "gmm", lambda *a, **kw: (calls.append(1), original(*a, **kw))[1])
    ids = torch.randint(0, 128, (1, 128), generator=torch.Generator().manual_seed(3))
    out_e, out_k = eager(input_ids=ids, labels=ids), model(input_ids=ids, labels=ids)
    out_e.loss.backward()
    out_k.loss.backward()
    assert len(calls) == 2, "the kernelized layer did not run the ragged-dot op"
    torch.testing.assert_close(out_k.logits, out_e.logits, **MODEL_TOL)
    for (name, p_k), (_, p_e) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p_k.grad, p_e.grad, **MODEL_TOL, msg=lambda m, n=name: f"{n}: {m}")
