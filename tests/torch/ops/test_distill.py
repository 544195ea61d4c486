"""The Torch distillation divergence (`distillation_divergence`, our kernels): the divergence and entropy
and the student's gradients (hidden states, weight, bias) against float64 Torch on CPU tensors (interpret
mode), with soft caps, scales, a temperature and hidden sizes that differ, for beta 0, 0.5 and 1; the
shared checks (fakes against JAX shapes, symbolic tracing, one graph for two sizes, the kernel count in
the TPU lowering), autograd on meta tensors (the divergence alone carries gradients, to the student
alone), a frozen head's backward (dx alone, one kernel), and bad calls."""

from __future__ import annotations

import importlib

import pytest
import torch

from . import checks

OP = "distillation_divergence"
ROWS, HS, HT, VOCAB = 70, 64, 96, 300
OPTIONS = dict(temperature=0.7, student_logit_scale=1.5, student_soft_cap=3.0, teacher_logit_scale=0.8,
               teacher_soft_cap=5.0)


def _operands() -> tuple[torch.Tensor, ...]:
    xs = checks.randn(ROWS, HS, seed=41, scale=2 * HS ** -0.5).requires_grad_()
    ws = checks.randn(VOCAB, HS, seed=42).requires_grad_()
    bs = checks.randn(VOCAB, seed=43, scale=0.25).requires_grad_()
    xt, wt, bt = checks.randn(ROWS, HT, seed=44, scale=3 * HT ** -0.5), checks.randn(VOCAB, HT, seed=45), None
    return xs, ws, bs, xt, wt, bt


def _log_probs(x, w, b, scale, cap):  # noqa: ANN001, ANN202
    z = (x @ w.T + (0 if b is None else b)) * scale
    return torch.log_softmax(cap * torch.tanh(z / cap) / OPTIONS["temperature"], -1)


def divergence64(lps: torch.Tensor, lpt: torch.Tensor, beta: float) -> torch.Tensor:
    """Per row, from both models' log-probabilities: KL(p_t || p_s) at beta 0, KL(p_s || p_t) at 1, else the
    generalized JSD."""
    ps, pt = lps.exp(), lpt.exp()
    if beta == 0.0:
        return (pt * (lpt - lps)).sum(-1)
    if beta == 1.0:
        return (ps * (lps - lpt)).sum(-1)
    lm = torch.logaddexp(lps + torch.log1p(torch.tensor(-beta)), lpt + torch.log(torch.tensor(beta)))
    return beta * (pt * (lpt - lm)).sum(-1) + (1 - beta) * (ps * (lps - lm)).sum(-1)


SCHEMES = [dict(chunk=0), dict(chunk=16), dict(scheme="recompute")]
SCHEME_IDS = ["kernels", "stored", "recompute"]


@pytest.mark.parametrize("way", SCHEMES, ids=SCHEME_IDS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_divergence_entropy_and_gradients_match_float64(ops, beta, way):
    """By the kernels, by the stored scheme in chunks of 16 rows (70 rows: the last chunk padded) and by the
    recompute scheme (its chunks on the chip the ops are traced for: all 70 rows, the 300 columns in one step)."""
    xs, ws, bs, xt, wt, bt = _operands()
    div, ent = ops.distillation_divergence(xs, ws, bs, xt, wt, bt, beta=beta, **way, **OPTIONS)
    g = checks.randn(ROWS, seed=46)
    (g * div).sum().backward()
    assert not ent.requires_grad and div.dtype == ent.dtype == torch.float32

    xs64, ws64, bs64 = (t.detach().double().requires_grad_() for t in (xs, ws, bs))
    lps = _log_probs(xs64, ws64, bs64, 1.5, 3.0)
    lpt = _log_probs(xt.double(), wt.double(), None, 0.8, 5.0)
    ps = lps.exp()
    want = divergence64(lps, lpt, beta)
    (g.double() * want).sum().backward()
    # float32 logits of O(3) summed over 300 columns: ~1e-6 relative; the gradients sum 300 columns or 70 rows
    torch.testing.assert_close(div.double(), want.detach(), rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(ent.double(), -(ps * lps).sum(-1).detach(), rtol=2e-5, atol=2e-6)
    for name, got, ref in (("dx", xs, xs64), ("dw", ws, ws64), ("db", bs, bs64)):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(("way", "name"), list(zip(SCHEMES, ("distill_divergence_bwd", "distill_divergence_stored_bwd",
                                                        "distill_divergence_recompute_bwd"), strict=True)),
                         ids=SCHEME_IDS)
def test_a_frozen_head_gives_dx_alone_as_the_full_backward(ops, way, name):
    """A student head whose weight and bias need no gradient (LoRA's): the dx-only op runs (one backward
    kernel, not two; the stored scheme's one matmul, not two; the recompute scheme's loop without dw's matmul) and
    gives the full backward's dx exactly."""
    xs, ws, bs, xt, wt, bt = _operands()
    grads = []
    for frozen in (False, True):
        x, w, b = (t.detach().clone().requires_grad_(t is xs or not frozen) for t in (xs, ws, bs))
        with checks.OpsSeen() as probe:
            div, _ = ops.distillation_divergence(x, w, b, xt, wt, bt, beta=0.5, **way, **OPTIONS)
            div.sum().backward()
        assert probe.seen[f"{name}_x" if frozen else name] == 1, probe.seen
        assert probe.seen[name if frozen else f"{name}_x"] == 0, probe.seen
        assert (w.grad is None) == frozen and (b.grad is None) == frozen
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def _bf16(rows: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return (torch.zeros(rows, 128, dtype=torch.bfloat16, device=device),
            torch.zeros(384, 128, dtype=torch.bfloat16, device=device), None,
            torch.zeros(rows, 256, dtype=torch.bfloat16, device=device),
            torch.zeros(384, 256, dtype=torch.bfloat16, device=device), None)


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops):
    f = checks.family(ops, "distill").custom_ops
    operands, row = _bf16(200), torch.zeros(200)
    setting = (0.5, 1.0, True, 30.0, 1.0, False, 1.0)
    checks.fake_matches_jax(ops, ops.distill_divergence_op, f._forward_jax, *operands, *setting)
    checks.fake_matches_jax(ops, ops.distill_divergence_bwd_op, f._backward_jax, *operands, *[row] * 5, *setting)
    checks.fake_matches_jax(ops, ops.distill_divergence_bwd_x_op, f._backward_x_jax, *operands, *[row] * 5, *setting)
    s = checks.family(ops, "distill").stored_ops
    _, _, q = checks.fake_matches_jax(ops, ops.distill_divergence_stored_op, s._stored_forward_jax, *operands,
                                      *setting, 64)
    assert tuple(q.shape) == (256, 384) and q.dtype == torch.bfloat16  # 200 rows padded to chunks of 64
    q, xs, ws = torch.zeros(256, 384, dtype=torch.bfloat16), operands[0], operands[1]
    checks.fake_matches_jax(ops, ops.distill_divergence_stored_bwd_op, s._stored_backward_jax, xs, ws, q, row)
    checks.fake_matches_jax(ops, ops.distill_divergence_stored_bwd_x_op, s._stored_backward_x_jax, xs, ws, q, row)
    r = checks.family(ops, "distill").recompute_ops
    checks.fake_matches_jax(ops, ops.distill_divergence_recompute_op, r._recompute_forward_jax, *operands, *setting,
                            64, 128)
    checks.fake_matches_jax(ops, ops.distill_divergence_recompute_bwd_op, r._recompute_backward_jax, *operands,
                            *[row] * 4, *setting, 128)
    checks.fake_matches_jax(ops, ops.distill_divergence_recompute_bwd_x_op, r._recompute_backward_x_jax, *operands,
                            *[row] * 4, *setting, 128)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(xs: torch.Tensor, ws: torch.Tensor, xt: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        div, ent = ops.distillation_divergence(xs, ws, None, xt, wt, None, beta=0.5, student_soft_cap=30.0)
        return div + ent

    def args(rows: int) -> tuple[torch.Tensor, ...]:
        xs, ws, _, xt, wt, _ = _bf16(rows, "meta")
        return xs, ws, xt, wt

    checks.traces_symbolically(step, *args(200))
    checks.compiles_once_for_two_sizes(step, args(200), args(333))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("way", [dict(chunk=0), dict(chunk=64), dict(scheme="recompute")], ids=SCHEME_IDS)
def test_autograd_wiring_on_meta(ops, way):
    """Gradients reach the student's hidden states, weight and bias in their dtypes through the divergence;
    the entropy carries none, and the teacher's tensors get none (as TRL)."""
    xs, ws, _, xt, wt, _ = _bf16(200, "meta")
    xs, ws, xt, wt = (t.requires_grad_() for t in (xs, ws, xt, wt))
    bs = torch.zeros(384, dtype=torch.bfloat16, device="meta", requires_grad=True)
    div, ent = ops.distillation_divergence(xs, ws, bs, xt, wt, None, beta=1.0, **way)
    assert div.requires_grad and not ent.requires_grad
    div.sum().backward()
    for t in (xs, ws, bs):
        assert (t.grad.shape, t.grad.dtype) == (t.shape, t.dtype)
    assert xt.grad is None and wt.grad is None


@pytest.mark.kernels_ci
def test_lowers_to_the_three_kernels(ops):
    f = checks.family(ops, "distill").custom_ops
    operands, row = _bf16(512), torch.zeros(512)
    setting = (0.5, 1.0, False, 1.0, 1.0, False, 1.0)
    assert checks.mosaic_kernels(ops, f._forward_jax, *operands, *setting) == 1
    assert checks.mosaic_kernels(ops, f._backward_jax, *operands, *[row] * 5, *setting) == 2
    assert checks.mosaic_kernels(ops, f._backward_x_jax, *operands, *[row] * 5, *setting) == 1


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.distill_divergence_op, ops.distill_divergence_bwd_op,
                                     ops.distill_divergence_bwd_x_op, ops.distill_divergence_stored_op,
                                     ops.distill_divergence_stored_bwd_op, ops.distill_divergence_stored_bwd_x_op,
                                     ops.distill_divergence_recompute_op, ops.distill_divergence_recompute_bwd_op,
                                     ops.distill_divergence_recompute_bwd_x_op)


@pytest.mark.kernels_ci
def test_the_chunk_is_the_packages_choice(ops):
    """`divergence_chunk` (what a call without `chunk` takes) is `distill.stored.choose`'s on the chip it is traced
    for (a v6e here: on a chip host the attached chip would answer otherwise): the stored scheme in one chunk of the
    rows rounded up to 8 at the tests' small sizes and a prefill's rows (`distill.stored.PREFILL`), in chunks of 1024
    at TRL's shapes where Q fits an eighth of the HBM (the v6e's 32 GiB at 4,096 rows), the kernels (0) where it does
    not."""
    pick = checks.family(ops, "distill").stored_ops.divergence_chunk
    tk = importlib.import_module(ops.__name__.rsplit(".", 1)[0])
    s = tk.distill.setting(0.5)

    def meta(rows: int, hidden: int) -> torch.Tensor:
        return torch.zeros(rows, hidden, dtype=torch.bfloat16, device="meta")

    with tk.emulation.emulated_chip("v6e"):
        assert pick(meta(200, 128), meta(200, 256), 384, s) == 200
        assert pick(meta(100, 2048), meta(100, 4096), 151936, s) == 104
        assert pick(meta(4096, 2048), meta(4096, 4096), 151936, s) == 1024
        assert pick(meta(16384, 2048), meta(16384, 4096), 151936, s) == 0


@pytest.mark.kernels_ci
def test_the_scheme_is_the_jax_calls_rule(ops):
    """`divergence_scheme` (what a call without `chunk` or `scheme` takes) is `distill.scheme_of`'s on the chip the
    ops are traced for, the JAX call's rule: on the v5e the stored scheme at Gemma 2 2B <- 9B's heads at 2,048 rows,
    the recompute scheme at 4,096 and 16,384 (Q past the stored scheme's share; it ran at 0.65x the kernels' time
    there, benchmarks/measured/v5e-2026-12-07-distill-recompute.json); the kernels at hidden sizes of 64 (where the
    recompute scheme's roofline is over theirs)."""
    pick = checks.family(ops, "distill").recompute_ops.divergence_scheme
    tk = importlib.import_module(ops.__name__.rsplit(".", 1)[0])
    s = tk.distill.setting(0.5, student_soft_cap=30.0, teacher_soft_cap=30.0)

    def meta(rows: int, hidden: int) -> torch.Tensor:
        return torch.zeros(rows, hidden, dtype=torch.bfloat16, device="meta")

    with tk.emulation.emulated_chip("v5e"):
        assert pick(meta(2048, 2304), meta(2048, 3584), 256000, s).scheme == "stored"
        for rows in (4096, 16384):
            chosen = pick(meta(rows, 2304), meta(rows, 3584), 256000, s)
            assert chosen == tk.distill.Chosen("recompute", tk.distill.recompute.row_chunk(
                tk.distill.blocks.Sizes(rows, 2304, 3584, 256000, 2, 2), tk.roofline.chip()), 2048), chosen
        assert pick(meta(16384, 64), meta(16384, 64), 256000, s).scheme == "kernels"


def _call(**changed):  # noqa: ANN003, ANN202
    def call(o):  # noqa: ANN001, ANN202
        args = dict(xs=torch.zeros(8, 128), ws=torch.zeros(256, 128), bs=None, xt=torch.zeros(8, 64),
                    wt=torch.zeros(256, 64), bt=None)
        options = {k: changed.pop(k) for k in list(changed) if k not in args}
        args.update(changed)
        return o.distillation_divergence(*args.values(), **{"beta": 0.5, **options})
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_call(xs=[[1.0]]), TypeError, "student_hidden must be a torch.Tensor, got list"),
    (_call(ws=torch.zeros(256, 128, dtype=torch.bfloat16)), TypeError,
     "the student's hidden states and weight must share a dtype, bfloat16 or float32; got float32 and bfloat16"),
    (_call(xt=torch.zeros(8, 64, dtype=torch.float16), wt=torch.zeros(256, 64, dtype=torch.float16)), TypeError,
     "the teacher's hidden states and weight must share a dtype, bfloat16 or float32; got float16"),
    (_call(ws=torch.zeros(256, 64)), ValueError, "the student's hidden size is 128 in its hidden states but 64"),
    (_call(wt=torch.zeros(255, 64)), ValueError, "the student's vocabulary (256) and the teacher's (255)"),
    (_call(xt=torch.zeros(7, 64)), ValueError, "the student's rows (8) and the teacher's (7) must be the same"),
    (_call(bt=torch.zeros(255)), ValueError, "the teacher's bias must be [vocab] (256), got"),
    (_call(beta=-0.1), ValueError, "beta must be a number in [0, 1], got -0.1"),
    (_call(temperature=0.0), ValueError, "temperature must be > 0, got 0.0"),
    (_call(student_soft_cap=-2.0), ValueError, "student_soft_cap must be > 0 or None, got -2.0"),
    (_call(chunk=-1), ValueError, "chunk must be an int >= 0 (0: the kernels) or None, got -1"),
    (_call(chunk=16.0), ValueError, "chunk must be an int >= 0 (0: the kernels) or None, got 16.0"),
    (_call(scheme="fused"), ValueError, "scheme must be one of ('auto', 'kernels', 'stored', 'recompute'), got"),
    (_call(scheme="recompute", chunk=16), ValueError, "chunk (16) is the stored scheme's rows per chunk; scheme "
                                                      "'recompute' takes none"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match=f"^tokamax {OP}: ") as info:
        call(ops)
    assert message in str(info.value)
