"""`tokamax.distill.loss` and its fused scheme (`distill.fused`: the weighted sum of the per-token divergences as a
step's loss, its gradients made in the forward, chunk by chunk) against float64 JAX from the definitions
(`reference`): the loss, the per-token divergence and entropy, and the student's gradients at beta 0, 0.5 and 1,
with biases, scales, soft caps and a temperature; weights of zero (masked tokens) and any values; rows (37) past
the whole chunks (16 here: two whole chunks and 5 rows, run as 16). float32 within 4x float32's own error
(`reference.tolerances`), bf16 (the accumulator kernel adding dw in the pair, its low half int8) within the
roundings the scheme makes. Then a frozen head (dw not made), per-token cotangents refused, the per-token
fallback, a cotangent of 1/3 that scales the unrounded gradients before their one rounding (exact operands, against
float64), and the rule `choose` follows."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .reference import reference, tolerances
from .test_kernels import SETTINGS, assert_within, operands

ROWS, HIDDEN_S, HIDDEN_T, VOCAB = 37, 64, 96, 1000
BF16 = 2.0 ** -8  # bf16's unit roundoff (8 significant bits, rounded to the nearest)


def _weights(rows: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    w = r.uniform(0.1, 1.0, rows).astype(np.float32)
    w[::4] = 0.0  # masked tokens
    return w


def run(distill, emulation, ops: tuple, options: dict, weights: np.ndarray, chunk: object = 16):  # noqa: ANN001, ANN201
    """(loss, divergence, entropy, (dx, dw, db)) of `distill.loss`."""
    xs, ws, bs, xt, wt, bt = ops
    bias = np.zeros(ws.shape[0], np.float32) if bs is None else bs

    def loss(xs, ws, b):  # noqa: ANN001, ANN202
        total, div, ent = distill.loss(xs, ws, None if bs is None else b, xt, wt, bt, jnp.asarray(weights),
                                       chunk=chunk, **options)
        return total, (div, ent)

    with emulation.interpret_on_cpu("v6e"):
        (total, (div, ent)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(
            xs, ws, bias)
    return float(total), np.asarray(div), np.asarray(ent), tuple(np.asarray(g) for g in grads)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("beta", [0.0, pytest.param(0.5, marks=pytest.mark.kernels_ci), 1.0])
def test_the_loss_and_its_gradients_match_float64(kernel, emulation, beta, setting):
    ops = operands(ROWS, HIDDEN_S, HIDDEN_T, VOCAB, seed=int(beta * 10) + len(setting), bias=setting != "plain")
    options = dict(beta=beta, **SETTINGS[setting])
    weights = _weights(ROWS, seed=3)
    total, div, ent, grads = run(kernel.distill, emulation, ops, options, weights)
    want_div, want_ent, want_grads = reference(ops, options, weights, np.zeros(ROWS, np.float32))
    bounds = tolerances(ops, options, weights, np.zeros(ROWS, np.float32))
    assert div.dtype == ent.dtype == np.float32 and div.shape == (ROWS,)
    assert_within("loss", np.float64(total), (weights.astype(np.float64) * want_div).sum(), ROWS * bounds[0])
    for name, got, want, bound in zip(("divergence", "entropy", "dx", "dw", "db"), (div, ent, *grads),
                                      (want_div, want_ent, *want_grads), bounds, strict=True):
        if name == "db" and ops[2] is None:
            assert not got.any()
            continue
        assert_within(name, got, want, bound)
    assert not grads[0][::4].any()  # a masked token's hidden state gets no gradient


@pytest.mark.kernels_ci
def test_bf16_takes_the_accumulator_kernel_within_the_schemes_roundings(kernel, emulation, monkeypatch):
    """bf16 operands: dw added by `lm_head.accumulate`'s kernel into the pair (its low half int8), traced once per
    part (the whole chunks' scan and the rows left), against the same call in float32: G is rounded once to bf16
    (TRL's one rounding), the operands are bf16, so each gradient within a few bf16 roundings of its magnitude."""
    accumulate = kernel.lm_head.accumulate
    calls: list[int] = []
    real = accumulate.into
    monkeypatch.setattr(accumulate, "into", lambda *a, **k: calls.append(1) or real(*a, **k))
    ops = operands(ROWS, 128, 256, 1280, seed=5)
    options = dict(beta=0.5, temperature=0.9)
    weights = _weights(ROWS, seed=4)
    bf16 = tuple(None if a is None or a.ndim == 1 else np.asarray(jnp.asarray(a, jnp.bfloat16)) for a in ops)
    bf16 = (bf16[0], bf16[1], ops[2], bf16[3], bf16[4], ops[5])
    total, div, ent, grads = run(kernel.distill, emulation, bf16, options, weights)
    assert len(calls) == 2, calls
    as32 = tuple(None if a is None else np.asarray(a, np.float32) for a in bf16)
    total32, div32, ent32, grads32 = run(kernel.distill, emulation, as32, options, weights)
    assert abs(total - total32) <= 4 * BF16 * abs(total32)
    for name, got, want in zip(("dx", "dw", "db"), grads, grads32, strict=True):
        got = np.asarray(got, np.float32)
        assert np.abs(got - want).max() <= 8 * BF16 * np.abs(want).max(), name


@pytest.mark.kernels_ci
def test_a_frozen_head_makes_dx_alone_and_per_token_cotangents_are_refused(kernel, emulation, monkeypatch):
    distill = kernel.distill
    made: list[bool] = []
    real = distill.fused.loss_and_grads
    monkeypatch.setattr(distill.fused, "loss_and_grads",
                        lambda *a, weight_grad=True, **k: made.append(weight_grad) or real(*a, weight_grad=weight_grad,
                                                                                          **k))
    xs, ws, bs, xt, wt, bt = operands(ROWS, HIDDEN_S, HIDDEN_T, VOCAB, seed=1)
    weights = jnp.asarray(_weights(ROWS, seed=2))
    with emulation.interpret_on_cpu("v6e"):
        dx = jax.grad(lambda xs: distill.loss(xs, ws, bs, xt, wt, bt, weights, beta=0.0, chunk=16)[0])(xs)
        assert made == [False] and dx.shape == xs.shape  # LoRA's frozen head: dw's matmul not made
        want = jax.grad(lambda xs: distill.loss(xs, ws, bs, xt, wt, bt, weights, beta=0.0, chunk=None)[0])(xs)
        np.testing.assert_allclose(np.asarray(dx), np.asarray(want), rtol=1e-4, atol=1e-6)  # the per-token call
        with pytest.raises(ValueError, match=r"tokamax distill.loss: a gradient through the per-token divergence"):
            jax.grad(lambda xs: distill.loss(xs, ws, bs, xt, wt, bt, weights, beta=0.0, chunk=16)[1].sum())(xs)
        with pytest.raises(ValueError, match=r"tokamax distill: weights must be \[rows\] \(37\)"):
            distill.loss(xs, ws, bs, xt, wt, bt, weights[:5], beta=0.0)
        with pytest.raises(ValueError, match=r"tokamax distill: chunk must be \"auto\", a number of rows or None"):
            distill.loss(xs, ws, bs, xt, wt, bt, weights, beta=0.0, chunk=0)


def _exact_distillation() -> tuple:
    """Operands whose gradients the fused scheme computes exactly before their last rounding (beta 0, KL(p_t || p_s):
    d/dz_s = p_s - p_t), as the Torch op's test builds them: the student's logits equal in a row (x_s zero past the
    first half of its hidden size, every vocabulary row's first half the same), p_s = 2^-8; the teacher's l ln 2 for
    l = 0, 1 or 3 (142, 5 and 109 of the 256 entries), p_t = 2^l / 1024. G = weight (p_s - p_t) is then 3 * 2^-10,
    2^-9 or -2^-8 times a weight of 1, 1/2 or 0, exact in bf16 however float32 rounded the softmaxes, and with values
    multiples of 1/8 in [-1, 1] dx, dw and db are exact in float32 and in the pair (at most 14 significant bits):
    float64's. ((xs, ws, bs), (xt, wt), levels, weights): bf16 but bs and the weights, float32."""
    rows, hidden, vocab = 64, 128, 256
    g = np.random.default_rng(48)
    xs = np.zeros((rows, hidden), np.float32)
    xs[:, :hidden // 2] = g.integers(-8, 9, size=(rows, hidden // 2)) / 8
    ws = (g.integers(-8, 9, size=(vocab, hidden)) / 8).astype(np.float32)
    ws[:, :hidden // 2] = ws[0, :hidden // 2]
    levels = g.permutation([0] * 142 + [1] * 5 + [3] * 109).astype(np.float32)
    xt, wt = np.zeros((rows, 32), np.float32), np.zeros((vocab, 32), np.float32)
    xt[:, 0], wt[:, 0] = 1.0, levels
    weights = np.ones(rows, np.float32)
    weights[::4], weights[1::4] = 0.5, 0.0
    bf16 = [jnp.asarray(a, jnp.bfloat16) for a in (xs, ws, xt, wt)]
    return (bf16[0], bf16[1], jnp.zeros(vocab, jnp.float32)), (bf16[2], bf16[3]), levels, weights


@pytest.mark.kernels_ci
def test_the_loss_rounds_its_scaled_gradients_once(kernel, emulation):
    """jax.grad of loss / 3 gives float64's dx and dw times 1/3 (float32's: the cotangent JAX hands the loss) rounded
    once to bf16, and db (float32) times it rounded once to float32, bit for bit, with the head trained (the pair
    its accumulator, chunks of 16) and frozen (dx alone): the forward holds dx float32 and dw's accumulator
    unrounded until the cotangent is known (`fused._pending`). Rounded to bf16 in the forward and again when
    scaled, some entries of dx and dw took another value (the Torch op's
    `test_the_loss_rounds_its_scaled_gradients_once`)."""
    distill = kernel.distill
    (xs, ws, bs), (xt, wt), levels, weights = _exact_distillation()
    options = dict(beta=0.0, teacher_scale=float(np.log(2.0)), chunk=16)

    def third(xs, ws, bs):  # noqa: ANN001, ANN202
        return distill.loss(xs, ws, bs, xt, wt, None, jnp.asarray(weights), **options)[0] / 3

    with emulation.interpret_on_cpu("v6e"):
        got = jax.jit(jax.grad(third, argnums=(0, 1, 2)))(xs, ws, bs)
        frozen = jax.jit(jax.grad(third))(xs, ws, bs)
    g = weights.astype(np.float64)[:, None] * (1 / 256 - 2.0 ** levels.astype(np.float64) / 1024)
    x64, w64 = (np.asarray(a, np.float64) for a in (xs, ws))
    exact = (g @ w64, g.T @ x64, g.sum(0))
    ops = (xs, ws, bs, xt, wt, None)
    want = reference(tuple(None if a is None else np.asarray(a, np.float32) for a in ops),
                     dict(beta=0.0, teacher_scale=options["teacher_scale"]), weights, np.zeros(64, np.float32))[2]
    scale = np.float64(np.float32(1 / 3))
    for name, a, e, w in zip(("dx", "dw", "db"), got, exact, want, strict=True):
        np.testing.assert_allclose(w, e, rtol=1e-12, atol=1e-15, err_msg=name)  # G as the docstring says
        dtype = a.dtype
        once = np.asarray(jnp.asarray(e * scale, jnp.float32).astype(dtype), np.float32)
        a = np.asarray(a, np.float32)
        assert np.array_equal(a, once), f"{name}: {(a != once).sum()} of {once.size} entries are not rounded once"
        if name != "db":  # bf16: the test tells the two apart (db stays float32, scaled in float32 either way)
            twice = np.asarray((jnp.asarray(e, jnp.float32).astype(dtype).astype(jnp.float32) * np.float32(scale))
                               .astype(dtype), np.float32)
            assert not np.array_equal(twice, once), name
    assert got[0].dtype == got[1].dtype == jnp.bfloat16 and got[2].dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(frozen, np.float32), np.asarray(got[0], np.float32))


@pytest.mark.kernels_ci
def test_the_rule_takes_the_largest_fitting_chunk_of_least_modelled_time(kernel, emulation):
    """At the chip benchmark's shapes on the v5e (student 896, teacher 3584, vocabulary 151,936: 8,192 and 16,384
    rows; Qwen3 1.7B from 8B at 4,096) the fused scheme takes chunks of 768 (measured 127.3 and 253.2 ms against
    XLA's 121.1 at 8,192 rows and nothing at 16,384, where XLA's logits outgrow the chip; 101.4 against 91.8 at the
    JSD's 4,096), within an eighth of HBM; a student accumulator past the share takes none (the per-token call)."""
    fused, sizes = kernel.distill.fused, kernel.distill.blocks.Sizes
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    for rows, hs, ht in ((8192, 896, 3584), (16384, 896, 3584), (4096, 2048, 4096)):
        s = sizes(rows, hs, ht, 151936)
        chunk = fused.choose(s, on)
        assert chunk == 768, (rows, chunk)
        assert fused.cost(s, chunk).temp_bytes + fused.SMALL_BUFFERS <= on.hbm // fused.HBM_SHARE
    assert fused.choose(sizes(8192, 16384, 4096, 151936), on) is None


@pytest.mark.kernels_ci
def test_rows_of_one_chunk_add_dw_by_xla_not_the_accumulator_kernel(kernel, emulation, monkeypatch):
    """Where the rows are one chunk (`fused.ONE_CHUNK`) there is nothing to add dw into: no `accumulate` kernel runs,
    dw is XLA's float32 accumulator rounded once (the bf16 result within the scheme's roundings of float32's), and
    the Torch ops' fakes (`held_pair`) say the same; rows past one chunk still take the kernel."""
    accumulate, fused = kernel.lm_head.accumulate, kernel.distill.fused
    calls: list[int] = []
    real = accumulate.into
    monkeypatch.setattr(accumulate, "into", lambda *a, **k: calls.append(1) or real(*a, **k))
    ops = operands(ROWS, 128, 256, 1280, seed=5)
    bf16 = tuple(None if a is None or a.ndim == 1 else np.asarray(jnp.asarray(a, jnp.bfloat16)) for a in ops)
    bf16 = (bf16[0], bf16[1], ops[2], bf16[3], bf16[4], ops[5])
    options, weights = dict(beta=0.5, temperature=0.9), _weights(ROWS, seed=4)
    total, _, _, grads = run(kernel.distill, emulation, bf16, options, weights, chunk=48)
    assert calls == [], "one chunk of 37 rows (48) added dw by the accumulate kernel"
    as32 = tuple(None if a is None else np.asarray(a, np.float32) for a in bf16)
    total32, _, _, grads32 = run(kernel.distill, emulation, as32, options, weights, chunk=48)
    assert abs(total - total32) <= 4 * BF16 * abs(total32)
    for name, got, want in zip(("dx", "dw", "db"), grads, grads32, strict=True):
        assert np.abs(np.asarray(got, np.float32) - want).max() <= 8 * BF16 * np.abs(want).max(), name
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    sizes = kernel.distill.blocks.Sizes(ROWS, 128, 256, 1280, 2, 2)
    assert not fused.held_pair(sizes, 48, on) and fused.held_pair(sizes, 16, on)
    assert fused.kernel_takes(48, 128, 1280, 2, on.vmem)


@pytest.mark.kernels_ci
def test_at_a_prefills_rows_the_rule_leaves_dw_to_xla(kernel, emulation):
    """`fused.ONE_CHUNK`'s shapes on the v5e (256 rows, vocabulary 151,936; students 1024 and 2048, teacher 4096),
    where the loss with the accumulate kernel ran 0.74-0.82x XLA's speed: one chunk of 256, no kernel, and the model
    puts it under the kernel's way by what that way wrote (the pair's 3 bytes an entry against dw's 2). Where XLA's
    float32 dw does not fit the share in one chunk (512 rows of the 2048 student: 2.3 GiB) the kernel adds it there,
    as before, rather than a smaller chunk."""
    fused, sizes = kernel.distill.fused, kernel.distill.blocks.Sizes
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
    for hs in (1024, 2048):
        s = sizes(256, hs, 4096, 151936)
        assert fused.choose(s, on) == 256 and not fused.held_pair(s, 256, on)
        mine, pair = fused.cost(s, 256, kernel=False), fused.cost(s, 256, kernel=True)
        assert mine.bytes_accessed == pair.bytes_accessed - 151936 * hs * 1
        assert mine.seconds(on) < pair.seconds(on)
    wide = sizes(512, 2048, 4096, 151936)
    assert fused.choose(wide, on) == 512 and fused.held_pair(wide, 512, on)
    assert fused.held_pair(sizes(4096, 2048, 4096, 151936), 768, on)  # training rows: the kernel stays
