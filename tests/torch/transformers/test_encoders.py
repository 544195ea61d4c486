"""Models without a causal mask on tokamax attention, against the same weights on eager attention:
a tiny Bart (a bidirectional encoder over a padded batch, a causal decoder with a cache, the
decoder's cross-attention to the padded encoder), forward, gradients and greedy generate(); a tiny
Bert encoder over a padded batch."""

from __future__ import annotations

import copy

import torch
import transformers

from tests.torch.export_probe import ExportProbe

from .models import ATTENTION, VOCAB, namespace, tokens

TOL = dict(rtol=1e-3, atol=1e-4)  # float32 both sides, summation order only


def _pair(model_cls: type, config: transformers.PreTrainedConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager, ours = model_cls(copy.deepcopy(config)).float(), model_cls(copy.deepcopy(config)).float()
    ours.load_state_dict(eager.state_dict())
    eager.set_attn_implementation("eager")
    ours.set_attn_implementation(ATTENTION)
    return eager, ours


def _encoder_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = tokens(2, 21, seed=1), torch.ones(2, 21, dtype=torch.int64)
    mask[1, 15:] = 0
    return ids, mask


def test_bart_forward_gradients_and_generation_match_eager(tokamax):
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=256, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, max_position_embeddings=256, dropout=0.0,
                                     attention_dropout=0.0)
    eager, ours = _pair(transformers.BartForConditionalGeneration, config)
    ids, mask = _encoder_batch()
    labels = tokens(2, 9, seed=2)
    outputs = []
    with ExportProbe(namespace(tokamax)) as probe:
        for model in (eager.train(), ours.train()):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            out.loss.backward()
            outputs.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                  if p.grad is not None}))
    # 2 encoder layers, 2 decoder layers with self- and cross-attention: 6 calls, each with a backward
    assert probe.count("splash_attention") == 6 and probe.count("splash_attention_bwd") == 6
    torch.testing.assert_close(outputs[1][0], outputs[0][0], **TOL)
    for name, grad in outputs[0][1].items():
        torch.testing.assert_close(outputs[1][1][name], grad, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    want, got = (m.eval().generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
                 for m in (eager, ours))
    assert torch.equal(got, want)


def test_bert_encoder_over_a_padded_batch_matches_eager(tokamax):
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    eager, ours = _pair(transformers.BertModel, config)
    ids, mask = _encoder_batch()
    want = eager.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    with ExportProbe(namespace(tokamax)) as probe:
        got = ours.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], **TOL)
    assert probe.count("splash_attention") == 2
