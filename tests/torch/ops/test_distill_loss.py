"""The Torch distillation loss (`distillation_loss`: the weighted sum of the per-token divergences, its gradients
made in the forward by the fused scheme): the loss, the per-token divergence and entropy and the student's
gradients against float64 Torch on CPU tensors (interpret mode), soft caps, scales, a temperature, masked tokens,
rows past the whole chunks, for beta 0, 0.5 and 1, and by the per-token op (`chunk=0`); the loss's cotangent
scales the gradients (no backward kernel), which are rounded once after it (exact operands, against float64); a
frozen head (dx alone); fakes against JAX shapes and autograd on meta tensors; bad calls."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from tests.jax.cases import rng

from . import checks
from .test_distill import OPTIONS, ROWS, VOCAB, _bf16, _log_probs, _operands, divergence64


def _weights() -> torch.Tensor:
    w = checks.randn(ROWS, seed=47).abs()
    w[::3] = 0.0  # masked tokens
    return w / w.sum()


def _want(xs, ws, bs, xt, wt, weights, beta):  # noqa: ANN001, ANN202
    """float64 (loss, divergence, entropy) and the student's leaves."""
    xs64, ws64, bs64 = (t.detach().double().requires_grad_() for t in (xs, ws, bs))
    lps = _log_probs(xs64, ws64, bs64, 1.5, 3.0)
    lpt = _log_probs(xt.double(), wt.double(), None, 0.8, 5.0)
    ps = lps.exp()
    div = divergence64(lps, lpt, beta)
    return (weights.double() * div).sum(), div, -(ps * lps).sum(-1), (xs64, ws64, bs64)


@pytest.mark.parametrize("chunk", [0, 16, None], ids=["per-token", "fused-16", "fused-auto"])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_the_loss_and_its_gradients_match_float64(ops, beta, chunk):
    """70 rows: in chunks of 16, four whole chunks and 6 rows; by the package's chunk (one chunk of the rows)."""
    xs, ws, bs, xt, wt, bt = _operands()
    weights = _weights()
    loss, div, ent = ops.distillation_loss(xs, ws, bs, xt, wt, bt, weights, beta=beta, chunk=chunk, **OPTIONS)
    assert loss.shape == () and not div.requires_grad and not ent.requires_grad
    (2.5 * loss).backward()  # the loss's cotangent scales the gradients made in the forward
    want, want_div, want_ent, leaves = _want(xs, ws, bs, xt, wt, weights, beta)
    (2.5 * want).backward()
    torch.testing.assert_close(loss.double(), want.detach(), rtol=2e-5, atol=2e-7)
    torch.testing.assert_close(div.double(), want_div.detach(), rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(ent.double(), want_ent.detach(), rtol=2e-5, atol=2e-6)
    for name, got, ref in zip(("dx", "dw", "db"), (xs, ws, bs), leaves, strict=True):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    assert not xs.grad[::3].any()  # a masked token's hidden state gets none


def test_a_frozen_head_gives_dx_alone(ops):
    xs, ws, bs, xt, wt, bt = _operands()
    grads = []
    for frozen in (False, True):
        x, w, b = (t.detach().clone().requires_grad_(t is xs or not frozen) for t in (xs, ws, bs))
        with checks.OpsSeen() as probe:
            loss, _, _ = ops.distillation_loss(x, w, b, xt, wt, bt, _weights(), beta=0.5, chunk=16, **OPTIONS)
            loss.backward()
        assert probe.seen["distill_loss_grad_x" if frozen else "distill_loss_grads"] == 1, probe.seen
        assert (w.grad is None) == frozen and (b.grad is None) == frozen
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes_and_autograd_on_meta(ops):
    loss = checks.family(ops, "distill").loss
    operands, weights = _bf16(200), torch.zeros(200)
    setting = (0.5, 1.0, True, 30.0, 1.0, False, 1.0)
    checks.fake_matches_jax(ops, ops.distill_loss_grads_op, loss._grads_jax, *operands, weights, *setting, 64)
    checks.fake_matches_jax(ops, ops.distill_loss_grad_x_op, loss._grad_x_jax, *operands, weights, *setting, 64)
    xs, ws, _, xt, wt, _ = _bf16(200, "meta")
    xs, ws, xt, wt = (t.requires_grad_() for t in (xs, ws, xt, wt))
    bs = torch.zeros(384, dtype=torch.bfloat16, device="meta", requires_grad=True)
    total, div, ent = ops.distillation_loss(xs, ws, bs, xt, wt, None, torch.zeros(200, device="meta"), beta=1.0,
                                            chunk=64)
    assert total.requires_grad and not div.requires_grad and not ent.requires_grad
    total.backward()
    for t in (xs, ws, bs):
        assert (t.grad.shape, t.grad.dtype) == (t.shape, t.dtype)
    assert xt.grad is None and wt.grad is None


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("change", "message"), [
    (dict(weights=torch.zeros(ROWS - 1)), r"tokamax distillation_loss: weights must be a float tensor of \[rows\]"),
    (dict(weights=torch.zeros(ROWS, dtype=torch.int32)), r"weights must be a float tensor"),
    (dict(chunk=-1), r"tokamax distillation_loss: chunk must be an int >= 0"),
    (dict(beta=1.5), r"tokamax distillation_divergence: beta must be a number in \[0, 1\]"),
])
def test_bad_calls_fail_naming_the_argument(ops, change, message):
    xs, ws, bs, xt, wt, bt = _operands()
    kwargs = dict(weights=_weights(), beta=0.5, chunk=16) | change
    with pytest.raises(ValueError, match=message):
        ops.distillation_loss(xs, ws, bs, xt, wt, bt, kwargs.pop("weights"), **kwargs)
    assert VOCAB == ws.shape[0]


def _exact_distillation() -> tuple:
    """Operands whose gradients the fused scheme computes exactly before their last rounding (beta 0, KL(p_t || p_s):
    d/dz_s = p_s - p_t): the student's logits equal in a row (x_s zero past the first half of its hidden size, every
    vocabulary row's first half the same), p_s = 2^-8; the teacher's l ln 2 for l = 0, 1 or 3 (142, 5 and 109 of the
    256 entries), p_t = 2^l / 1024. G = weight (p_s - p_t) is then 3 * 2^-10, 2^-9 or -2^-8 times a weight of 1, 1/2
    or 0, exact in bf16 however float32 rounded the softmaxes, and with values multiples of 1/8 in [-1, 1] dx, dw and
    db are exact in float32 and in the pair (at most 14 significant bits): float64's."""
    rows, hidden, vocab = 64, 128, 256
    g = rng(48)
    xs = torch.zeros(rows, hidden)
    xs[:, :hidden // 2] = torch.from_numpy(g.integers(-8, 9, size=(rows, hidden // 2)) / 8)
    ws = torch.from_numpy(g.integers(-8, 9, size=(vocab, hidden)) / 8).float()
    ws[:, :hidden // 2] = ws[0, :hidden // 2]
    levels = torch.from_numpy(g.permutation([0] * 142 + [1] * 5 + [3] * 109)).float()
    xt, wt = torch.zeros(rows, 32), torch.zeros(vocab, 32)
    xt[:, 0], wt[:, 0] = 1.0, levels
    weights = torch.ones(rows)
    weights[::4], weights[1::4] = 0.5, 0.0
    student = [t.to(torch.bfloat16).requires_grad_() for t in (xs, ws, torch.zeros(vocab))]
    return student, (xt.to(torch.bfloat16), wt.to(torch.bfloat16)), levels, weights


@pytest.mark.kernels_ci
def test_the_loss_rounds_its_scaled_gradients_once(ops):
    """(loss / 3).backward() gives float64's dx, dw and db times 1/3, rounded once to bf16, bit for bit
    (`test_lm_head.rounded_once_and_twice`): the op's gradients stay unrounded until the cotangent is known. Rounded
    to bf16 in the forward and again when scaled, some entries of dx and dw took another value."""
    from .test_lm_head import rounded_once_and_twice

    (xs, ws, bs), (xt, wt), levels, weights = _exact_distillation()
    loss, _, _ = ops.distillation_loss(xs, ws, bs, xt, wt, None, weights, beta=0.0, chunk=16,
                                       teacher_logit_scale=math.log(2.0))
    (loss / 3).backward()
    xs64, ws64, bs64 = (t.detach().double().requires_grad_() for t in (xs, ws, bs))
    p_t = 2.0 ** levels.double() / 1024
    g = weights.double()[:, None] * (1 / 256 - p_t)  # d loss / d z_s: p_s - p_t, weighted
    lps = torch.log_softmax(xs64 @ ws64.T + bs64, -1)
    (weights.double() * divergence64(lps, p_t.log().expand_as(lps), 0.0)).sum().backward()
    scale = torch.tensor(1 / 3)  # the cotangent autograd hands the op: float32's 1/3
    for name, got, leaf, exact in (("dx", xs, xs64, g @ ws64.detach()), ("dw", ws, ws64, g.T @ xs64.detach()),
                                   ("db", bs, bs64, g.sum(0))):
        torch.testing.assert_close(leaf.grad, exact, rtol=1e-12, atol=1e-15)  # G as the docstring says
        once, twice = rounded_once_and_twice(exact, got.dtype, scale)
        assert got.grad.dtype == torch.bfloat16 and torch.equal(got.grad, once), \
            f"{name}: {(got.grad != once).sum()} of {once.numel()} entries are not the once-rounded value"
        if name != "db":  # the test tells the two apart (db's few bits are exact in bf16)
            assert not torch.equal(twice, once), name


@pytest.mark.kernels_ci
def test_the_chunk_is_the_jax_losss_rule(ops):
    """`distill_loss_chunk` (what a call without `chunk` takes) is `distill.fused.loss_chunk`'s on the chip it is
    traced for: on the v5e at 4,096 rows of Qwen3 1.7B <- 8B's heads the per-token op (0; its stored scheme, where the
    fused chunks would add dw by the pair: `fused.PAIR_SLOWER`), at 8,192 rows of Qwen2.5 0.5B <- 7B's the fused
    chunks of 768 (the stored scheme's Q past the share), at 256 rows the fused scheme's one chunk; a frozen head
    keeps the fused chunks at 4,096 rows (no pair)."""
    pick = checks.family(ops, "distill").loss.distill_loss_chunk
    tk = importlib.import_module(ops.__name__.rsplit(".", 1)[0])

    def meta(rows: int, hidden: int) -> torch.Tensor:
        return torch.zeros(rows, hidden, dtype=torch.bfloat16, device="meta")

    with tk.emulation.emulated_chip("v5e"):
        assert pick(meta(4096, 2048), meta(4096, 4096), 151936) == 0
        assert pick(meta(8192, 896), meta(8192, 3584), 151936) == 768
        assert pick(meta(256, 2048), meta(256, 4096), 151936) == 256
        assert pick(meta(4096, 2048), meta(4096, 4096), 151936, weight_grad=False) > 0
