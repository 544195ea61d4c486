"""The fused loss's options on the labels path (`tokamax.use_fused_loss(model, ...)`, our LM-head
kernels in interpret mode): families that change their logits before the loss (Gemma 2's soft cap,
Cohere's logit scale, Granite's logits scaling) and an LM head with a bias train to transformers' own
loss and gradients; z-loss, label smoothing and `reduction="none"` (per-token losses, each with its
own gradient) against float64 Torch from the plain model's logits; transformers' `Trainer` with
`label_smoothing_factor` against the fused loss's `label_smoothing` (one SGD step: loss and every
parameter's change); bad options refused."""

from __future__ import annotations

import copy
import tempfile

import pytest
import torch
import transformers

from tests.float32_bounds import assert_float32_close

from .test_fused_loss import TERMS, VOCAB, _assert_same, _batch, _llama, _loss_and_grads

SMALL = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, head_dim=64, max_position_embeddings=128)


def _pair(model_cls: type, config: transformers.PreTrainedConfig, tokamax, **options):  # noqa: ANN001, ANN003, ANN202
    """(transformers' loss, the fused loss) on equal float32 weights, eager attention."""
    torch.manual_seed(0)
    plain = model_cls(copy.deepcopy(config)).float()
    fused = model_cls(copy.deepcopy(config)).float()
    fused.load_state_dict(plain.state_dict())
    for model in (plain, fused):
        model.set_attn_implementation("eager")
    tokamax.use_fused_loss(fused, **options)
    return plain.train(), fused.train()


def _with_bias() -> tuple[type, transformers.PreTrainedConfig]:
    class BiasedLlama(transformers.LlamaForCausalLM):
        def __init__(self, config: transformers.PreTrainedConfig) -> None:
            super().__init__(config)
            self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=True)
            torch.nn.init.normal_(self.lm_head.bias, std=0.5)

    return BiasedLlama, transformers.LlamaConfig(**SMALL)


FAMILIES = {
    "gemma2-soft-cap": lambda: (transformers.Gemma2ForCausalLM, transformers.Gemma2Config(
        **SMALL, final_logit_softcapping=3.0, attn_logit_softcapping=None, query_pre_attn_scalar=64)),
    "cohere-logit-scale": lambda: (transformers.CohereForCausalLM, transformers.CohereConfig(
        **SMALL, logit_scale=0.25)),
    "granite-logits-scaling": lambda: (transformers.GraniteForCausalLM, transformers.GraniteConfig(
        **SMALL, logits_scaling=4.0)),
    "llama-head-bias": _with_bias,
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_families_that_change_their_logits_train_to_transformers_loss(tokamax, family):
    plain, fused = _pair(*FAMILIES[family](), tokamax)
    ids, mask, labels = _batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    got, want = _loss_and_grads(fused, **inputs), _loss_and_grads(plain, **inputs)
    _assert_same(got, want)
    assert got[0].logits is None


def _float64_losses(logits: torch.Tensor, labels: torch.Tensor, z_loss: float, smoothing: float) -> torch.Tensor:
    """Per label position [batch, len] (0 where ignored), from the plain model's logits in float64."""
    z = logits[:, :-1].double()
    targets = labels[:, 1:]
    valid = targets != -100
    lse = torch.logsumexp(z, -1)
    picked = z.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    per = (1 - smoothing) * (lse - picked) + smoothing * (lse - z.mean(-1)) + z_loss * lse.square()
    per = torch.where(valid, per, 0.0)
    return torch.nn.functional.pad(per, (0, 1))


@pytest.mark.parametrize(("z_loss", "smoothing", "reduction"), [(1e-2, 0.0, "mean"), (0.0, 0.1, "mean"),
                                                                (1e-2, 0.1, "sum"), (1e-2, 0.1, "none")])
def test_z_loss_label_smoothing_and_per_token_losses_match_float64(tokamax, z_loss, smoothing, reduction):
    plain, fused = _pair(transformers.LlamaForCausalLM, _llama(), tokamax, z_loss=z_loss, label_smoothing=smoothing,
                         reduction=reduction)
    ids, mask, labels = _batch()
    out = fused(input_ids=ids, attention_mask=mask, labels=labels)
    per = _float64_losses(plain(input_ids=ids, attention_mask=mask).logits, labels, z_loss, smoothing)
    valid = (labels[:, 1:] != -100).sum()
    want = {"mean": per.sum() / valid, "sum": per.sum(), "none": per}[reduction]
    assert out.loss.shape == want.shape == ((2, 37) if reduction == "none" else ())
    cotangent = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    (out.loss * cotangent).sum().backward()
    (want * cotangent.double()).sum().backward()
    assert_float32_close(out.loss, want.detach(), terms=TERMS, msg="loss")
    for (name, p), (_, q) in zip(fused.named_parameters(), plain.named_parameters(), strict=True):
        assert_float32_close(p.grad, q.grad, terms=TERMS, msg=name)


def test_trainers_label_smoothing_factor_as_the_fused_loss_label_smoothing(tokamax):
    """A user of transformers' Trainer sets label smoothing on the fused loss instead of Trainer's
    `label_smoothing_factor` (which takes the labels out of the model's call and smooths the logits): one SGD
    step of each from the same weights gives the same loss and the same parameters."""
    from datasets import Dataset

    plain, fused = _pair(transformers.LlamaForCausalLM, _llama(), tokamax, label_smoothing=0.1)
    before = {n: p.detach().clone() for n, p in plain.named_parameters()}
    ids, mask, labels = _batch()
    data = Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "labels": labels.tolist()})
    results = []
    for model, factor in ((plain, 0.1), (fused, 0.0)):
        args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=1, per_device_train_batch_size=2,
                                              optim="sgd", learning_rate=0.5, lr_scheduler_type="constant",
                                              max_grad_norm=0.0, label_smoothing_factor=factor, report_to="none",
                                              use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        results.append((trainer.state.log_history[0]["loss"], {n: p.detach() for n, p in model.named_parameters()}))
    (want_loss, want), (got_loss, got) = results
    assert got_loss == pytest.approx(want_loss, rel=1e-4)
    for name in want:  # the steps taken (learning rate x gradient), each within the gradients' float32 bound
        assert_float32_close(got[name] - before[name], want[name] - before[name], terms=TERMS, msg=name)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("options", "message"), [
    (dict(reduction="max"), "reduction must be one of ['mean', 'sum', 'none'], got 'max'"),
    (dict(label_smoothing=1.0), "label_smoothing must be in [0, 1), got 1.0"),
    (dict(z_loss=-1e-4), "z_loss must be >= 0, got -0.0001"),
])
def test_bad_options_are_refused(tokamax, options, message):
    with pytest.raises(ValueError, match="tokamax use_fused_loss") as info:
        tokamax.use_fused_loss(transformers.LlamaForCausalLM(_llama()), **options)
    assert message in str(info.value)
