"""The Torch LM-head statistics (`lm_head_statistics`: the stored scheme where a layout of it fits the share,
`test_lm_head_stored.py`, else our kernels): the seven statistics and the gradients in the hidden states, the weight and
the bias against float64 Torch on CPU tensors (interpret mode) by either scheme (the kernels forced as torch.compile or
a call past the share takes them), with a soft cap (the stored scheme keeping its one chunk's float32 logits) or
without, a scale and a temperature, int64 targets as TRL passes them; the shared checks (fakes against JAX shapes,
symbolic tracing, one graph for two sizes, the kernel count in the TPU lowering), autograd on meta tensors (only the
four differentiable statistics carry gradients), a frozen head's backward (dx alone, one kernel), and bad calls.
`lm_head_cross_entropy`: targets outside the vocabulary, its gradients under a cotangent of 1/3 rounded once by every
scheme (exact operands, against float64), its fakes (dW's accumulator as each chip's way leaves it) and autograd on meta
tensors."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.jax.cases import rng

from . import checks

OP = "lm_head_statistics"
ROWS, HIDDEN, VOCAB = 70, 64, 300


def _operands() -> tuple[torch.Tensor, ...]:
    x = checks.randn(ROWS, HIDDEN, seed=21, scale=HIDDEN ** -0.5).requires_grad_()
    w = checks.randn(VOCAB, HIDDEN, seed=22).requires_grad_()
    b = checks.randn(VOCAB, seed=23, scale=0.25).requires_grad_()
    targets = torch.from_numpy(rng(24).integers(0, VOCAB, size=ROWS))  # int64, as TRL hands them
    return x, w, b, targets


SCHEMES = {"kernels": 3.0, "stored": None, "stored, soft cap": 3.0}
"""The soft cap each scheme's tests take: the op runs the stored scheme at these sizes (`stored_ops.statistics_layout`;
under a soft cap its one chunk's float32 logits), the kernels where `_scheme` forces them; the custom ops of each scheme
are named `lm_head_stats...` and `lm_head_stats_stored...`."""


def _scheme(monkeypatch: pytest.MonkeyPatch, tokamax: object, scheme: str) -> str:
    """The custom ops' prefix of `scheme`, the kernels forced where named (no stored layout: what torch.compile's
    graphs and calls past the share get)."""
    if scheme == "kernels":
        api = importlib.import_module(f"{tokamax.__name__}.torch_ops.lm_head.api")
        monkeypatch.setattr(api, "statistics_layout", lambda *args: None)
        return "lm_head_stats"
    return "lm_head_stats_stored"


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_statistics_and_gradients_match_float64(ops, tokamax, monkeypatch, scheme):
    x, w, b, targets = _operands()
    cap = SCHEMES[scheme]
    op = _scheme(monkeypatch, tokamax, scheme)
    with checks.OpsSeen() as probe:
        stats = ops.lm_head_statistics(x, w, b, targets, logit_scale=1.5, soft_cap=cap, temperature=0.7)
        g = [checks.randn(ROWS, seed=30 + i) for i in range(4)]
        weighted = (g[0] * stats.log_probs + g[1] * stats.entropy + g[2] * stats.lse.square()
                    + g[3] * (stats.sum_logits + stats.mean_logit))
        weighted.sum().backward()
    assert probe.seen[op] == probe.seen[f"{op}_bwd"] == 1, probe.seen

    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    raw = (x64 @ w64.T + b64) * 1.5
    z = (raw if cap is None else cap * torch.tanh(raw / cap)) / 0.7
    logp = torch.log_softmax(z, -1)
    p = logp.exp()
    rows = torch.arange(ROWS)
    want = dict(lse=torch.logsumexp(z, -1), log_probs=logp[rows, targets], entropy=-(p * logp).sum(-1),
                log_sum_sq_probs=torch.logsumexp(2 * logp, -1), sum_logits=z.sum(-1), mean_logit=(p * z).sum(-1))
    (g[0].double() * want["log_probs"] + g[1].double() * want["entropy"] + g[2].double() * want["lse"].square()
     + g[3].double() * (want["sum_logits"] + want["mean_logit"])).sum().backward()
    # float32 operands and logits (the stored scheme's p in float32 too): summation order over 64 and 300 terms
    for name, expected in want.items():
        torch.testing.assert_close(getattr(stats, name).double(), expected.detach(), rtol=2e-5, atol=5e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    assert torch.equal(stats.top1.bool(), z.argmax(-1) == targets)
    for name, got, ref in (("dx", x, x64), ("dw", w, w64), ("db", b, b64)):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.kernels_ci
def test_the_outputs_keep_their_old_positions(ops, tokamax):
    """The op's third output was the mean logit E_p[z] and became the entropy, so a caller unpacking by position
    got the entropy silently: the six keep their old places (the raw op's too) and the entropy comes last, each
    against float64; a gradient through the mean logit is float64's."""
    rows, vocab = 16, 128
    x = checks.randn(rows, HIDDEN, seed=41, scale=HIDDEN ** -0.5).requires_grad_()
    w = checks.randn(vocab, HIDDEN, seed=42).requires_grad_()
    targets = torch.from_numpy(rng(43).integers(0, vocab, size=rows))
    assert ops.LMHeadStatistics._fields == tokamax.lm_head.OUTPUTS == (
        "lse", "target_logit", "mean_logit", "log_sum_sq_probs", "sum_logits", "top1", "entropy")
    lse, target_logit, mean_logit, log_sum_sq_probs, sum_logits, top1, entropy = ops.lm_head_statistics(
        x, w, None, targets)
    raw = ops.lm_head_stats_op(x, w, None, targets.to(torch.int32), 1.0, False, 1.0)
    g = checks.randn(rows, seed=44)
    (g * mean_logit).sum().backward()
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    z = x64 @ w64.T
    p = torch.softmax(z, -1)
    want_mean, want_entropy = (p * z).sum(-1), -(p * torch.log_softmax(z, -1)).sum(-1)
    (g.double() * want_mean).sum().backward()
    for name, got, want in (("mean_logit", mean_logit, want_mean), ("raw op's third", raw[2], want_mean),
                            ("entropy", entropy, want_entropy), ("raw op's last", raw[-1], want_entropy),
                            ("lse", lse, torch.logsumexp(z, -1)), ("sum_logits", sum_logits, z.sum(-1))):
        torch.testing.assert_close(got.detach().double(), want.detach(), rtol=2e-5, atol=5e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    for name, got, ref in (("dx", x, x64), ("dw", w, w64)):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_a_frozen_head_gives_dx_alone_as_the_full_backward(ops, tokamax, monkeypatch, scheme):
    """A head whose weight and bias need no gradient (LoRA's): the dx-only op runs (one backward kernel, not
    two; the stored scheme's one matmul, not two) and gives the full backward's dx exactly (the same code on the
    same inputs)."""
    x, w, b, targets = _operands()
    op = _scheme(monkeypatch, tokamax, scheme)
    grads = []
    for frozen in (False, True):
        xs, ws, bs = (t.detach().clone().requires_grad_(t is x or not frozen) for t in (x, w, b))
        with checks.OpsSeen() as probe:
            stats = ops.lm_head_statistics(xs, ws, bs, targets, soft_cap=SCHEMES[scheme])
            (stats.log_probs + 0.5 * stats.entropy).sum().backward()
        assert probe.seen[f"{op}_bwd_x" if frozen else f"{op}_bwd"] == 1, probe.seen
        assert probe.seen[f"{op}_bwd" if frozen else f"{op}_bwd_x"] == 0, probe.seen
        assert (ws.grad is None) == frozen and (bs.grad is None) == frozen
        grads.append(xs.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "lm_head").custom_ops
    x, w, b = torch.zeros(200, 128, dtype=torch.bfloat16), torch.zeros(384, 128, dtype=torch.bfloat16), torch.zeros(384)
    targets, row = torch.zeros(200, dtype=torch.int32), torch.zeros(200)
    checks.fake_matches_jax(ops, ops.lm_head_stats_op, f._stats_jax, x, w, b, targets, 1.0, True, 30.0)
    checks.fake_matches_jax(ops, ops.lm_head_stats_bwd_op, f._stats_bwd_jax, x, w, b, targets, row, row, row, row,
                            row, row, 1.0, False, 1.0)
    checks.fake_matches_jax(ops, ops.lm_head_stats_bwd_x_op, f._stats_bwd_x_jax, x, w, b, targets, row, row, row,
                            row, row, row, 1.0, False, 1.0)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(x: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        stats = ops.lm_head_statistics(x, w, None, targets, soft_cap=30.0)
        return stats.log_probs + stats.entropy

    def args(rows: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(rows, 128, device="meta"), torch.zeros(384, 128, device="meta"),
                torch.zeros(rows, dtype=torch.int32, device="meta"))

    checks.traces_symbolically(step, *args(200))
    checks.compiles_once_for_two_sizes(step, args(200), args(333))


@pytest.mark.kernels_ci
def test_autograd_wiring_on_meta(ops):
    """Gradients reach hidden, weight and bias in their dtypes through the five differentiable statistics;
    log_sum_sq_probs and top1 carry none (as TRL marks them)."""
    x = torch.zeros(200, 128, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.zeros(384, 128, dtype=torch.bfloat16, device="meta", requires_grad=True)
    b = torch.zeros(384, dtype=torch.bfloat16, device="meta", requires_grad=True)
    stats = ops.lm_head_statistics(x, w, b, torch.zeros(200, dtype=torch.int32, device="meta"))
    assert [s.requires_grad for s in stats] == [True, True, True, False, True, False, True]
    (stats.log_probs + stats.mean_logit + stats.entropy + stats.sum_logits).sum().backward()
    for t in (x, w, b):
        assert (t.grad.shape, t.grad.dtype) == (t.shape, t.dtype)


@pytest.mark.kernels_ci
def test_lowers_to_the_three_kernels(ops):
    f = checks.family(ops, "lm_head").custom_ops
    x, w = torch.zeros(512, 256, dtype=torch.bfloat16), torch.zeros(1024, 256, dtype=torch.bfloat16)
    targets, row = torch.zeros(512, dtype=torch.int32), torch.zeros(512)
    assert checks.mosaic_kernels(ops, f._stats_jax, x, w, None, targets, 1.0, False, 1.0) == 1
    assert checks.mosaic_kernels(ops, f._stats_bwd_jax, x, w, None, targets, *[row] * 6, 1.0, False, 1.0) == 2
    assert checks.mosaic_kernels(ops, f._stats_bwd_x_jax, x, w, None, targets, *[row] * 6, 1.0, False, 1.0) == 1


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.lm_head_stats_op, ops.lm_head_stats_bwd_op,
                                     ops.lm_head_stats_bwd_x_op)


def _call(x=None, w=None, b=None, targets=None, **kw):  # noqa: ANN001, ANN003, ANN202
    def call(o):  # noqa: ANN001, ANN202
        return o.lm_head_statistics(torch.zeros(8, 128) if x is None else x, torch.zeros(256, 128) if w is None else w,
                                    b, torch.zeros(8, dtype=torch.int32) if targets is None else targets, **kw)
    return call


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_call(x=[[1.0]]), TypeError, "hidden must be a torch.Tensor, got list"),
    (_call(x=torch.zeros(8, 128, dtype=torch.float16)), TypeError, "hidden must be bfloat16 or float32"),
    (_call(w=torch.zeros(256, 128, dtype=torch.bfloat16)), TypeError, "hidden and weight must share a dtype"),
    (_call(w=torch.zeros(256)), ValueError, "weight must be [vocab, hidden], got shape (256,)"),
    (_call(w=torch.zeros(256, 64)), ValueError, "the hidden sizes must agree: hidden has 128, weight has 64"),
    (_call(targets=torch.zeros(8)), TypeError, "targets must be int32 or int64, got torch.float32"),
    (_call(targets=torch.zeros(7, dtype=torch.int32)), ValueError, "targets must be [rows] = [8], got shape (7,)"),
    (_call(b=torch.zeros(255)), ValueError, "bias must be [vocab] = [256], got shape (255,)"),
    (_call(temperature=0.0), ValueError, "temperature must be > 0, got 0.0"),
    (_call(soft_cap=-2.0), ValueError, "soft_cap must be > 0 or None, got -2.0"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match=f"tokamax {OP}") as info:
        call(ops)
    assert message in str(info.value)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("bad", [-1, VOCAB, -100])
def test_targets_outside_the_vocabulary_are_refused_on_cpu(ops, bad):
    """A target in no column gave its row a target logit of 0 (log-probability -lse) with no error; on CPU
    tensors (reading them is free) the op refuses it, naming the values, as the cross-entropy its labels."""
    x, w, b, targets = _operands()
    targets[[5, 6]] = bad
    with pytest.raises(ValueError, match=rf"^tokamax {OP}: targets must be in \[0, {VOCAB}\); got 2 outside, "
                                         rf"e\.g\. \[{bad}\]$"):
        ops.lm_head_statistics(x, w, b, targets)


def test_targets_outside_the_vocabulary_make_nan_rows_where_they_are_not_read(ops):
    """Compiled (as on a TPU, the targets are not read on the host): the rows of out-of-range targets are NaN
    in every statistic and pass no gradient, the other rows as with valid targets."""
    rows, vocab = 16, 128  # one block of each: the kernels' grid is what interpret mode pays for
    x = checks.randn(rows, HIDDEN, seed=25, scale=HIDDEN ** -0.5).requires_grad_()
    w = checks.randn(vocab, HIDDEN, seed=26).requires_grad_()
    b = checks.randn(vocab, seed=27, scale=0.25).requires_grad_()
    wrong = torch.from_numpy(rng(28).integers(0, vocab, size=rows))
    wrong[[5, 6]] = torch.tensor([-1, vocab])
    ok = torch.ones(rows, dtype=torch.bool)
    ok[[5, 6]] = False

    def step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> tuple:
        stats = ops.lm_head_statistics(x, w, b, t)
        torch.where(ok, stats.log_probs + stats.entropy, 0.0).sum().backward()
        return stats

    compiled = torch.compile(step, backend="eager", fullgraph=False)  # both on the kernels (torch.compile's choice)
    got = compiled(x, w, b, wrong)
    got_grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    want = compiled(x, w, b, torch.where(ok, wrong, 0))
    for name, g, expected in zip(ops.LMHeadStatistics._fields, got, want, strict=True):
        assert g[~ok].isnan().all() and torch.equal(g[ok], expected[ok].detach()), name
    for name, g, t in zip(("dx", "dw", "db"), got_grads, (x, w, b), strict=True):
        torch.testing.assert_close(g, t.grad, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("chunk", [128, 0], ids=["chunked", "kernels"])
def test_cross_entropy_refuses_or_nans_a_kept_target_outside_the_vocabulary(ops, tokamax, chunk):
    """`lm_head_cross_entropy` called directly with a kept target in no column: Liger's chunked scheme gave it
    loss = lse alone and a gradient without the -1, silently, where our kernels give NaN. Now, by either scheme,
    CPU tensors are refused naming the values (an ignored row's target is not read) and, compiled (not read on
    the host), the loss is NaN and the gradients are the other rows' (float64's with that row dropped)."""
    rows, vocab = 64, 300
    x = checks.randn(rows, HIDDEN, seed=31, scale=HIDDEN ** -0.5).requires_grad_()
    w = checks.randn(vocab, HIDDEN, seed=32).requires_grad_()
    targets = torch.from_numpy(rng(33).integers(0, vocab, size=rows))
    weights = torch.ones(rows)
    weights[5], targets[5] = 0.0, -100  # ignored: never read
    targets[17] = 307
    identity = tokamax.lm_head.IDENTITY
    with pytest.raises(ValueError, match=r"^tokamax lm_head_cross_entropy: targets must be in \[0, 300\); got 1 "
                                         r"outside, e\.g\. \[307\]$"):
        ops.lm_head_cross_entropy(x, w, None, targets, weights, identity, chunk=chunk)

    def step(x: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        loss = ops.lm_head_cross_entropy(x, w, None, t, weights, identity, chunk=chunk)
        loss.backward()
        return loss.detach()

    loss = torch.compile(step, backend="eager", fullgraph=False)(x, w, targets)
    assert loss.isnan()
    kept = weights.bool()
    kept[17] = False
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    logp = torch.log_softmax(x64 @ w64.T, -1)
    (-logp[kept, targets[kept]].sum()).backward()
    for name, got, ref in (("dx", x, x64), ("dw", w, w64)):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def _grid(g: object, *shape: int) -> torch.Tensor:
    """Multiples of 1/8 in [-1, 1]: their products with bf16's 8-bit values, and sums of those, are exact in float32."""
    return torch.from_numpy(g.integers(-8, 9, size=shape) / 8).to(torch.float32)


def _exact_head(bias: bool) -> tuple:
    """A head whose gradients the op computes exactly before their last rounding: x zero past the first half of the
    hidden size and every vocabulary row's first half the same, so a row's 256 logits are equal and p = 2^-8;
    G = weight (p - [target]) is then 2^-8 and -255/256 times a weight of 1, 1/2 or 0, exact in bf16 however the
    float32 p was rounded, and dx = G @ w, dW = G.T @ x and db are exact in float32 in any order of summation (at
    most 14 significant bits: the int8 low half of the pair holds them too): float64's values."""
    rows, hidden, vocab = 64, 128, 256
    g = rng(35)
    x = torch.zeros(rows, hidden)
    x[:, :hidden // 2] = _grid(g, rows, hidden // 2)
    w = _grid(g, vocab, hidden)
    w[:, :hidden // 2] = w[0, :hidden // 2]
    targets = torch.from_numpy(g.integers(0, vocab, size=rows))
    weights = torch.ones(rows)
    weights[::4], weights[1::4] = 0.5, 0.0
    leaves = [t.to(torch.bfloat16).requires_grad_() for t in (x, w, torch.zeros(vocab))]
    return (*leaves[:2], leaves[2] if bias else None), targets, weights


def rounded_once_and_twice(exact: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor) -> tuple:
    """float64 `exact` times `scale` rounded once to `dtype` (exact has at most 14 significant bits, so exact / 3 is
    at least 2^-14 / 3 of its size from any bf16 tie, far past float32's rounding on the way), and as the op's old
    backward gave it: rounded in the forward, then its float32 product with the cotangent rounded again."""
    once = (exact * scale.double()).to(dtype)
    return once, (exact.to(dtype).float() * scale).to(dtype)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chunk", [64, 0, 512], ids=["chunked", "kernels", "v5e-pair"])
def test_cross_entropy_rounds_its_scaled_gradients_once(ops, tokamax, monkeypatch, chunk):
    """(loss / 3).backward() gives float64's dx, dW and db times 1/3, rounded once to bf16, bit for bit, by every
    scheme: the chunked one in chunks of 64 (XLA's float32 dW) and on the v5e in chunks of 512 (`accumulate`'s
    kernel into the pair, its low half int8: high + low scaled in float32), and the kernels, whose backward runs
    with the cotangent in the per-row coefficients (as `lm_head.loss`'s under jax.grad): they round G / 3 to bf16
    for their matmuls (not exact: the reference rounds it too), then dx and dW once. The gradients made in
    the forward were rounded to bf16 there and again when scaled: another value in some entries of dx and dW, shown
    on the reference (`twice`)."""
    if chunk == 512:
        monkeypatch.setenv(tokamax.emulation.CPU_CHIP_VARIABLE, "v5e")
    (x, w, b), targets, weights = _exact_head(bias=True)
    x64, w64, b64 = (t.detach().double() for t in (x, w, b))
    logits = x64 @ w64.T + b64
    assert (logits == logits[:, :1]).all()  # so p = 1/256: the loss's gradients in float64, exactly
    g = weights.double()[:, None] * (1 / 256 - torch.nn.functional.one_hot(targets, 256).double())
    loss = ops.lm_head_cross_entropy(x, w, b, targets, weights, tokamax.lm_head.IDENTITY, chunk=chunk)
    (loss / 3).backward()
    scale = torch.tensor(1 / 3)  # the cotangent autograd hands the op: float32's 1/3
    g_third = (g * scale.double()).to(torch.bfloat16).double()  # the kernels' G, rounded with the cotangent in it
    grads = {"dx": lambda g: g @ w64, "dw": lambda g: g.T @ x64, "db": lambda g: g.sum(0)}
    for (name, grad), got in zip(grads.items(), (x, w, b), strict=True):
        once, twice = rounded_once_and_twice(grad(g), got.dtype, scale)
        if not chunk and name != "db":  # db sums the kernels' float32 G
            once = grad(g_third).to(got.dtype)
        assert got.grad.dtype == torch.bfloat16 and torch.equal(got.grad, once), \
            f"{name}: {(got.grad != once).sum()} of {once.numel()} entries are not the once-rounded value"
        if name != "db":  # the test tells the two apart (db's few bits are exact in bf16)
            assert not torch.equal(twice, once), name


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("chip", "rows", "chunk", "bias"), [
    ("v6e", 200, 64, True),  # XLA's float32 accumulator
    ("v6e", 200, 0, True),  # the kernels' dW, rounded (not what `lm_head_cross_entropy` takes at chunk 0)
    ("v5e", 200, 512, False),  # `accumulate`'s kernel into the pair, its low half int8
    ("v5e", 1024, 1024, False),  # the streamed kernels into the 16-bit pair
], ids=["float32", "kernels", "int8-pair", "bf16-pair"])
def test_cross_entropy_fakes_match_jax_shapes_and_autograd_on_meta(ops, tokamax, chip, rows, chunk, bias):
    """The fakes give dW's accumulator as the chip's way at that chunk leaves it (`fused.held_accumulator`), without
    tracing; the kernels' pair of ops (chunk 0) their rows; on meta tensors the gradients reach x, w and b in their
    dtypes by either pair of ops."""
    f = checks.family(ops, "lm_head").loss
    x, w = torch.zeros(rows, 128, dtype=torch.bfloat16), torch.zeros(256, 128, dtype=torch.bfloat16)
    b = torch.zeros(256, dtype=torch.bfloat16) if bias else None
    targets, row = torch.zeros(rows, dtype=torch.int32), torch.zeros(rows)
    statics = (1.0, False, 1.0, 0.0, 0.0, chunk)
    with tokamax.emulation.emulated_chip(chip):
        checks.fake_matches_jax(ops, ops.lm_head_loss_grads_op, f._loss_grads_jax, x, w, b, targets, row, *statics,
                                chip=chip)
        checks.fake_matches_jax(ops, ops.lm_head_loss_grad_x_op, f._loss_grad_x_jax, x, w, b, targets, row,
                                *statics, chip=chip)
    rows_out = checks.fake_matches_jax(ops, ops.lm_head_loss_rows_op, f._rows_jax, x, w, b, targets, row,
                                       *statics[:-1])
    assert [t.dtype for t in rows_out[1:3]] == [torch.int32, torch.float32]
    bwd = (x, w, b, targets, row, row, row, row, row, torch.ones(1), *statics[:3])
    checks.fake_matches_jax(ops, ops.lm_head_loss_rows_bwd_op, f._rows_bwd_jax, *bwd)
    checks.fake_matches_jax(ops, ops.lm_head_loss_rows_bwd_x_op, f._rows_bwd_x_jax, *bwd)
    leaves = [None if t is None else t.to("meta").requires_grad_() for t in (x, w, b)]
    loss = ops.lm_head_cross_entropy(*leaves, targets.to("meta"), row.to("meta"), tokamax.lm_head.IDENTITY,
                                     chunk=chunk)
    (loss / 3).backward()
    for t in leaves:
        assert t is None or (t.grad.shape, t.grad.dtype) == (t.shape, t.dtype)
