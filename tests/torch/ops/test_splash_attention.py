"""Torch splash attention on CPU tensors (interpret mode): values and gradients against float64 Torch
attention (causal, local window, MQA, GQA, segment ids with a soft cap and sinks), the shared checks
and bad calls failing in the op's own words."""

from __future__ import annotations

import pytest
import torch

from . import checks


def _attention_reference(q, k, v, mask):  # noqa: ANN001, ANN202
    if k.dim() == 2:
        k, v = k.expand(q.shape[0], *k.shape), v.expand(q.shape[0], *v.shape)
    scores = torch.einsum("hqd,hkd->hqk", q, k).masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,hkd->hqd", scores.softmax(-1), v)


@pytest.mark.parametrize(("mqa", "window"), [(False, None), (True, None), (False, (64, 0))],
                         ids=["mha-causal", "mqa-causal", "mha-local"])
def test_splash_attention_forward_and_gradients_match_torch(ops, mqa, window):
    q = checks.randn(2, 256, 128, seed=4, scale=128**-0.5).requires_grad_()
    kv_shape = (256, 128) if mqa else (2, 256, 128)
    k = checks.randn(*kv_shape, seed=5, scale=128**-0.5).requires_grad_()
    v = checks.randn(*kv_shape, seed=6).requires_grad_()
    out = ops.splash_attention(q, k, v, window=window)
    cotangent = checks.randn(2, 256, 128, seed=7)
    (out * cotangent).sum().backward()

    i, j = torch.arange(256)[:, None], torch.arange(256)[None, :]
    mask = (j <= i) if window is None else (j >= i - window[0]) & (j <= i + window[1])
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _attention_reference(q64, k64, v64, mask)
    (ref * cotangent.double()).sum().backward()
    # f32 inputs; the online softmax reorders f32 arithmetic (differences of a few 1e-7).
    tol = dict(rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        torch.testing.assert_close(got.double(), want, **tol)


def test_splash_attention_with_fewer_kv_heads_matches_torch(ops):
    """Grouped-query attention: 4 q heads over 2 kv heads, causal; forward and gradients."""
    q = checks.randn(4, 256, 128, seed=21, scale=128**-0.5).requires_grad_()
    k = checks.randn(2, 256, 128, seed=22, scale=128**-0.5).requires_grad_()
    v = checks.randn(2, 256, 128, seed=23).requires_grad_()
    out = ops.splash_attention(q, k, v)
    cotangent = checks.randn(4, 256, 128, seed=24)
    (out * cotangent).sum().backward()
    i, j = torch.arange(256)[:, None], torch.arange(256)[None, :]
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _attention_reference(q64, k64.repeat_interleave(2, 0), v64.repeat_interleave(2, 0), j <= i)
    (ref * cotangent.double()).sum().backward()
    tol = dict(rtol=1e-4, atol=2e-5)  # as the MHA test: f32, online-softmax reordering
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        torch.testing.assert_close(got.double(), want, **tol)



@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(3, 256, 128), torch.zeros(3, 256, 128)),
     ValueError, "q's 2 heads must be a multiple of k's 3"),
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(256, 64), torch.zeros(256, 64)),
     ValueError, "head_dim differs: q 128, k 64"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax") as info:
        call(ops)
    assert message in str(info.value)




def test_segment_ids_soft_cap_and_sinks_match_torch(ops):
    """Two packed documents (100 and 156 tokens), causal, logits capped at 5 (unscaled q: logits of a
    few units, so the cap bends them), a sink logit per head; values and gradients of q, k, v and the
    sinks against float64 Torch: cap * tanh(s / cap), masked to the causal same-document pairs, with
    exp(sink) added to each softmax denominator."""
    q, k = checks.randn(2, 256, 128, seed=31, scale=0.3).requires_grad_(), checks.randn(2, 256, 128, seed=32, scale=0.3)
    v, sinks = checks.randn(2, 256, 128, seed=33), checks.randn(2, seed=34)
    k, sinks, v = k.requires_grad_(), sinks.requires_grad_(), v.requires_grad_()
    segments = torch.tensor([0] * 100 + [1] * 156, dtype=torch.int32)
    out = ops.splash_attention(q, k, v, segment_ids=segments, soft_cap=5.0, sinks=sinks)
    cotangent = checks.randn(2, 256, 128, seed=35)
    (out * cotangent).sum().backward()

    q64, k64, v64, s64 = (x.detach().double().requires_grad_() for x in (q, k, v, sinks))
    i, j = torch.arange(256)[:, None], torch.arange(256)[None, :]
    mask = (j <= i) & (segments[:, None] == segments[None, :])
    logits = 5.0 * torch.tanh(torch.einsum("hqd,hkd->hqk", q64, k64) / 5.0)
    logits = logits.masked_fill(~mask, float("-inf"))
    top = torch.maximum(logits.amax(-1, keepdim=True), s64[:, None, None])
    weights = (logits - top).exp()
    denominator = weights.sum(-1, keepdim=True) + (s64[:, None, None] - top).exp()
    ref = torch.einsum("hqk,hkd->hqd", weights / denominator, v64)
    (ref * cotangent.double()).sum().backward()
    tol = dict(rtol=1e-4, atol=5e-5)  # f32; online softmax and tanh reordered
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad), (sinks.grad, s64.grad)):
        torch.testing.assert_close(got.double(), want, **tol)


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "splash_attention")
    checks.assert_in_build_namespace(tokamax, ops.splash_op, ops.splash_bwd_op)
    q, k = torch.zeros(4, 256, 128, dtype=torch.bfloat16), torch.zeros(2, 256, 128, dtype=torch.bfloat16)
    segments, sinks, rows = torch.zeros(256, dtype=torch.int32), torch.zeros(4), torch.zeros(4, 256)
    for seg, snk, statics in ((None, None, (True, -1, -1, -1.0)), (None, None, (True, 64, 0, -1.0)),
                              (segments, sinks, (True, -1, -1, 5.0))):
        checks.fake_matches_jax(ops, ops.splash_op, f._splash_jax, q, k, k, seg, snk, *statics)
        checks.fake_matches_jax(ops, ops.splash_bwd_op, f._splash_bwd_jax, q, k, k, seg, snk, q, rows, rows, q,
                                *statics)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        return ops.splash_attention(q, k, v, segment_ids=segments, soft_cap=30.0)

    def meta(length: int) -> tuple:
        qkv = [torch.zeros(2, length, 128, device="meta") for _ in range(3)]
        return (*qkv, torch.zeros(length, dtype=torch.int32, device="meta"))

    checks.traces_symbolically(step, *meta(256))
    checks.compiles_once_for_two_sizes(step, meta(256), meta(384))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "splash_attention")
    q = torch.zeros(2, 1024, 128, dtype=torch.bfloat16)
    assert checks.public_op_classes(ops, f._splash_jax, q, q, q, None, None, True, -1, -1, -1.0) == {
        "PallasMosaicTpuSplashAttention"}
    # the backward: upstream's VJP Op on the saved residuals, no forward kernel again
    rows = torch.zeros(2, 1024)
    assert checks.public_op_classes(ops, f._splash_bwd_jax, q, q, q, None, None, q, rows, rows, q, True, -1, -1,
                                    -1.0) == {"PallasMosaicTpuSplashAttentionVjp"}
