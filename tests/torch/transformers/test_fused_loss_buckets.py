"""The fused loss's labels path (`use_fused_loss`, transformers' `ForCausalLMLoss` on the kernel) as a
trainer drives it:
- dynamic padding gives every batch its own token count; the rows are padded to `tokamax.splash.bucket`
  sizes, so torch-tpu exports one program per bucket, not one per batch (counted with its own key
  function over 20 batches, whichever scheme `lm_head.fused` picks per bucket), and the padding changes
  no loss (against float64);
- under autocast (`Trainer(bf16=True)` on float32 weights) the head computes in bf16, as transformers'
  own head does, not in the weight's float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.torch.export_probe import ExportProbe

from .models import namespace

HIDDEN, VOCAB = 128, 384


def _causal(tokamax):  # noqa: ANN001, ANN202
    import importlib

    return importlib.import_module(f"{tokamax.__name__}.integrations.transformers.loss.causal_lm")


def _loss_fn(tokamax):  # noqa: ANN001, ANN202
    return _causal(tokamax).causal_lm_loss


def _batches(count: int, seed: int = 0) -> list[tuple[int, int]]:
    """(rows, length) of `count` batches padded to their longest sequence (DataCollatorWithPadding)."""
    r = np.random.default_rng(seed)
    return [(4, int(r.integers(30, 700))) for _ in range(count)]


@pytest.mark.parametrize("options", [None, "z_loss"])
def test_twenty_dynamically_padded_batches_export_once_per_bucket(tokamax, options):
    loss_fn, buckets = _loss_fn(tokamax), tokamax.splash.bucket
    causal = _causal(tokamax)
    opts = None if options is None else causal.LossOptions(z_loss=1e-4)
    weight = torch.empty(VOCAB, HIDDEN, device="meta", dtype=torch.bfloat16, requires_grad=True)
    shapes = _batches(20)
    with ExportProbe(namespace(tokamax)) as probe:
        for rows, length in shapes:
            hidden = torch.empty(rows, length, HIDDEN, device="meta", dtype=torch.bfloat16, requires_grad=True)
            labels = torch.zeros(rows, length, device="meta", dtype=torch.int64)
            loss_fn(hidden, weight, labels, options=opts).backward()
    token_counts = {rows * length for rows, length in shapes}
    expected = {buckets(n) for n in token_counts}
    exports = probe.exports()
    assert len(token_counts) == 20  # without the buckets: an export per batch
    # training: the gradients from the forward (`lm_head_loss_grads`) where the chunked scheme is chosen for
    # the bucket, else the loss-only path's forward op and its backward op (with options our kernels':
    # `lm_head_loss_rows`, their backward run with the cotangent)
    forwards = {"lm_head_loss_grads", *(["linear_softmax_cross_entropy_rows"] if options is None else
                                        ["lm_head_stats", "lm_head_loss_rows"])}
    assert sum(exports.get(op, 0) for op in forwards) == len(expected) < 20, exports
    assert {shape[0] for op, shape in probe.query_shapes if op in forwards} == expected
    assert sum(exports.values()) <= 2 * len(expected), exports


@pytest.mark.parametrize("options", [None, "label_smoothing"])
def test_padding_to_the_bucket_changes_no_loss(tokamax, options):
    """37 x 3 positions (111 rows, bucket 128), a third of them ignored: the mean, the sum over
    num_items_in_batch and the per-position losses against float64."""
    causal = _causal(tokamax)
    eps = 0.1 if options else 0.0
    torch.manual_seed(0)
    hidden, weight = torch.randn(3, 37, HIDDEN), torch.randn(VOCAB, HIDDEN) * 0.1
    labels = torch.randint(0, VOCAB, (3, 37))
    labels[:, ::3] = -100
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    logits = hidden.double() @ weight.double().T
    log_p = torch.log_softmax(logits, -1)
    keep = shifted != -100
    nll = -log_p.gather(-1, shifted.clamp(min=0)[..., None])[..., 0]
    per = torch.where(keep, (1 - eps) * nll - eps * log_p.mean(-1), 0.0)
    for reduction, num_items, want in (("mean", None, per.sum() / keep.sum()), ("mean", 50, per.sum() / 50),
                                       ("none", None, per)):
        got = causal.causal_lm_loss(hidden, weight, labels, num_items_in_batch=num_items,
                                    options=causal.LossOptions(label_smoothing=eps, reduction=reduction))
        assert got.shape == want.shape
        # float32 dots of 128 terms and sums of 384: far inside 1e-5 relative to losses of ~6
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_autocast_computes_the_head_in_its_dtype(tokamax, ops, monkeypatch):
    """A float32 model under bf16 autocast (what `Trainer(bf16=True)` runs): its fused loss hands the
    kernel bf16 hidden states and weight, as transformers' own head computes in bf16; without autocast,
    float32. The loss under autocast is transformers' own within bf16 rounding of the logits."""
    import transformers

    real, dtypes = ops.lm_head_cross_entropy, []

    def recorded(x, weight, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        dtypes.append((x.dtype, weight.dtype))
        return real(x, weight, *args, **kwargs)

    # a prefill's rows: the chunked scheme in one chunk (`lm_head.fused.ONE_CHUNK`), the gradients from the forward
    monkeypatch.setattr(ops, "lm_head_cross_entropy", recorded)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    plain = transformers.LlamaForCausalLM(config).float().train()  # no dropout in this config
    fused = transformers.LlamaForCausalLM(config).float().train()  # the fused loss serves training forwards
    fused.load_state_dict(plain.state_dict())
    tokamax.use_fused_loss(fused)
    ids = torch.randint(0, VOCAB, (2, 19))
    losses = []
    for autocast in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            losses.append(tuple(m(input_ids=ids, labels=ids).loss.detach() for m in (fused, plain)))
    assert dtypes == [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)], dtypes
    (ours_bf16, theirs_bf16), (ours_f32, theirs_f32) = losses
    # transformers rounds each bf16 logit (|z| < ~1 here) to 2^-9 before its float32 loss; ours keeps them in
    # float32: the mean losses differ by at most about that
    torch.testing.assert_close(ours_bf16, theirs_bf16, rtol=0, atol=2**-8)
    torch.testing.assert_close(ours_f32, theirs_f32, rtol=1e-5, atol=1e-5)
