"""Training on the labels path computes the loss's gradients in the forward (`torch_ops.lm_head_cross_entropy`,
`tokamax.lm_head.fused`; our kernels': in the backward, with the loss's cotangent) by whichever scheme the chip
gets, and both give transformers' own loss and
gradients: Liger's chunked scheme (forced here at 128-row chunks) and our kernels (forced: chunk 0; the
plain cross-entropy then keeps upstream's kernel, four matmuls to our five), for the plain cross-entropy,
with z-loss and label smoothing against float64, a head with a bias and a soft cap;
a frozen head (LoRA's) gets no weight gradient and runs the dx-only op (by either scheme: with our kernels,
one forward and one dx kernel, where upstream's would also compute dW); evaluation (no gradient wanted) and
`reduction="none"` keep the loss-only path. The op that ran is counted."""

from __future__ import annotations

import pytest
import torch

from tests.float32_bounds import assert_float32_close
from tests.torch.export_probe import ExportProbe

from .models import namespace
from .test_fused_loss import TERMS, _assert_same, _batch, _loss_and_grads
from .test_fused_loss_options import FAMILIES, SMALL, _float64_losses, _pair

SCHEMES = {"chunked": 128, "kernels": 0}


@pytest.fixture
def scheme(request, tokamax, monkeypatch):  # noqa: ANN001, ANN201
    """Pins the scheme `lm_head.fused.choose` would pick (the chip's HBM and roofline decide it)."""
    chunk = SCHEMES[request.param]
    monkeypatch.setattr(tokamax.torch_ops, "loss_chunk", lambda *args: chunk)
    return request.param


def _calls(tokamax, run):  # noqa: ANN001, ANN202
    with ExportProbe(namespace(tokamax)) as probe:
        out = run()
    return out, {op for op, _ in probe.calls}


@pytest.mark.parametrize("scheme", list(SCHEMES), indirect=True)
@pytest.mark.parametrize("family", ["plain", "gemma2-soft-cap", "llama-head-bias"])
def test_gradients_from_the_forward_equal_transformers(tokamax, scheme, family):
    import transformers

    model = (transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL)) if family == "plain" \
        else FAMILIES[family]()
    plain, fused = _pair(*model, tokamax)
    ids, mask, labels = _batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(50))
    want = _loss_and_grads(plain, **inputs)
    got, ran = _calls(tokamax, lambda: _loss_and_grads(fused, **inputs))
    _assert_same(got, want)
    if family == "plain" and scheme == "kernels":  # upstream's kernel: one matmul forward, three backward
        assert ran == {"linear_softmax_cross_entropy_rows", "linear_softmax_cross_entropy_rows_bwd"} | (
            ran & {"splash_attention", "splash_attention_bwd"}), ran
    else:  # the chunked scheme's gradients from the forward, or our kernels' backward run with the cotangent
        forward = "lm_head_loss_grads" if scheme == "chunked" else "lm_head_loss_rows"
        assert forward in ran and not {"lm_head_stats_bwd", "linear_softmax_cross_entropy_rows_bwd"} & ran


@pytest.mark.parametrize("scheme", list(SCHEMES), indirect=True)
def test_z_loss_and_label_smoothing_against_float64(tokamax, scheme):
    import transformers

    z_loss, smoothing = 1e-3, 0.1
    plain, fused = _pair(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL), tokamax, z_loss=z_loss,
                         label_smoothing=smoothing)
    ids, mask, labels = _batch()
    with torch.no_grad():
        logits = plain(input_ids=ids, attention_mask=mask).logits
    per = _float64_losses(logits, labels, z_loss, smoothing)
    kept = (torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:] != -100).sum()
    loss = fused(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert_float32_close(loss, per.sum() / kept, terms=TERMS, msg="loss")
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in fused.parameters() if p.requires_grad)


@pytest.mark.parametrize("scheme", list(SCHEMES), indirect=True)
def test_a_frozen_head_gets_dx_alone(tokamax, scheme):
    import transformers

    plain, fused = _pair(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL), tokamax)
    for model in (plain, fused):
        model.lm_head.weight.requires_grad_(False)
    ids, mask, labels = _batch()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    want = _loss_and_grads(plain, **inputs)
    got, ran = _calls(tokamax, lambda: _loss_and_grads(fused, **inputs))
    _assert_same(got, want)
    dx_alone, full = ("lm_head_loss_grad_x", "lm_head_loss_grads") if scheme == "chunked" else (
        "lm_head_loss_rows_bwd_x", "lm_head_loss_rows_bwd")
    assert "lm_head.weight" not in got[1] and dx_alone in ran and full not in ran


@pytest.mark.parametrize("scheme", ["chunked"], indirect=True)
def test_evaluation_and_per_position_losses_keep_the_loss_only_path(tokamax, scheme):
    import transformers

    _, fused = _pair(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL), tokamax)
    ids, mask, labels = _batch()
    with torch.no_grad():
        _, ran = _calls(tokamax, lambda: fused(input_ids=ids, attention_mask=mask, labels=labels))
    assert ran and not {"lm_head_loss_grads", "lm_head_loss_grad_x"} & ran
    _, per_position = _pair(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL), tokamax,
                            reduction="none")
    _, ran = _calls(tokamax, lambda: per_position(input_ids=ids, attention_mask=mask, labels=labels))
    assert ran and not {"lm_head_loss_grads", "lm_head_loss_grad_x"} & ran
