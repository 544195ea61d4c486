"""`lm_head.statistics(..., scheme="stored")` (`lm_head.stored`: plain XLA over chunks of rows, the softmax kept for the
rows that fit, the others' logits computed again in a backward that steps over the vocabulary) against float64 numpy:
the seven statistics and the gradients of a weighted sum of the differentiable ones, with a bias and without, a scale
and a temperature, a soft cap (its kept rows' float32 logits), rows that pad the last chunk, several chunks, one chunk
(fewer rows than a chunk), every row kept, some, none, steps narrower than the vocabulary and a last narrower one, bf16;
targets outside the vocabulary (refused on the host, NaN rows traced that pass no gradient); the refusals (kept rows off
the chunk, an unknown scheme); the backward's residual p in x's dtype and no float32 [rows, vocab] array beside it; the
layout's rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .reference import assert_bf16_close, gradients, operands, reference

# float32 operands, XLA's float32 matmuls on the CPU: summation order only (~1e-6 relative); p kept in float32
TOL = dict(rtol=2e-5, atol=5e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)
TRANSFORMS = {"plain": dict(), "scale-temperature": dict(scale=0.125, temperature=0.7)}


@pytest.fixture(autouse=True)
def _traced_for_a_chip(emulation):  # noqa: ANN001, ANN202 - the chunk is chosen by the chip's HBM
    with emulation.emulated_chip("v6e"):
        yield


def _weighted(lm_head, targets, cotangents, transform):  # noqa: ANN001, ANN202
    def loss(x, w, b):  # noqa: ANN001, ANN202
        s = lm_head.statistics(x, w, b, targets, transform, scheme="stored")
        return sum((g * v).sum() for g, v in zip(cotangents, (s.lse, s.target_logit, s.entropy, s.sum_logits),
                                                   strict=True)), s
    return loss


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize(("rows", "chunk", "bias"), [(37, 16, True), (37, 16, False), (24, 1024, True)],
                         ids=["3-chunks-padded", "no-bias", "one-chunk"])
def test_statistics_and_gradients_match_float64(kernel, monkeypatch, transform, rows, chunk, bias):
    lm_head = kernel.lm_head
    monkeypatch.setattr(lm_head.stored, "CHUNKS", (chunk,))
    t = lm_head.LogitTransform.of(**TRANSFORMS[transform])
    x, w, b, targets = operands(rows, 64, 200, seed=rows + chunk)
    b = b if bias else None
    r = np.random.default_rng(2)
    cotangents = [r.standard_normal(rows).astype(np.float32) for _ in range(4)]
    (_, stats), (dx, dw, db) = jax.jit(jax.value_and_grad(_weighted(lm_head, targets, cotangents, t),
                                                          argnums=(0, 1, 2), has_aux=True))(x, w, b)
    want, _, _, _ = reference(x, w, b, targets, t)
    for name in lm_head.OUTPUTS:
        np.testing.assert_allclose(np.asarray(getattr(stats, name)), want[name], err_msg=name, **TOL)
    want_dx, want_dw, want_db = gradients(x, w, b, targets, t, cotangents)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype and (db is None) == (b is None)
    for name, got, expected in (("dx", dx, want_dx), ("dw", dw, want_dw), ("db", db, want_db)):
        if got is not None:
            np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, **GRAD_TOL)


LAYOUTS = {"all-kept": (16, 48, 1024), "some-kept": (16, 16, 128), "none-kept": (16, 0, 256),
           "kept-past-rows": (8, 40, 384)}


RUNS = [(t, lay) for t in (*TRANSFORMS, "soft-cap") for lay in LAYOUTS]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("transform", "layout"), RUNS)
def test_every_layout_matches_float64(kernel, transform, layout):
    """37 rows, vocabulary 300 (not a multiple of the lanes): p kept for every row (the padded ones too), the first
    16 or none, in steps of 128 columns (two, then 44), 256 or 384; under a soft cap (its dz/dl differs per logit)
    the kept rows hold their float32 logits (`stored.KEPT_LOGITS`), the others' computed again."""
    lm_head = kernel.lm_head
    chunk, kept, columns = LAYOUTS[layout]
    if transform == "soft-cap":
        t = lm_head.LogitTransform.of(soft_cap=3.0, temperature=0.8)
    else:
        t = lm_head.LogitTransform.of(**TRANSFORMS[transform])
    x, w, b, targets = operands(37, 64, 300, seed=11)
    r = np.random.default_rng(3)
    cotangents = [r.standard_normal(37).astype(np.float32) for _ in range(4)]

    def loss(x, w, b):  # noqa: ANN001, ANN202
        s = lm_head.statistics(x, w, b, targets, t, scheme="stored", layout=lm_head.stored.Layout(chunk, kept, columns))
        return sum((g * v).sum() for g, v in zip(cotangents, (s.lse, s.target_logit, s.entropy, s.sum_logits),
                                                   strict=True)), s

    (_, stats), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(x, w, b)
    want, _, _, _ = reference(x, w, b, targets, t)
    for name in lm_head.OUTPUTS:
        np.testing.assert_allclose(np.asarray(getattr(stats, name)), want[name], err_msg=name, **TOL)
    for name, got, expected in zip(("dx", "dw", "db"), grads, gradients(x, w, b, targets, t, cotangents),
                                   strict=True):
        np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, **GRAD_TOL)


@pytest.mark.kernels_ci
def test_bf16_operands(kernel, monkeypatch):
    """bf16 x and w (the reference takes the same bf16 values): float32 logits, so the statistics are as exact as
    for float32; p is kept in bf16 (2^-8 relative) and the gradient G rounded once more to bf16 before its matmuls
    (as TRL rounds its logits' gradient): errors of 2^-8 of the largest gradient, as the kernels'."""
    lm_head = kernel.lm_head
    monkeypatch.setattr(lm_head.stored, "CHUNKS", (32,))
    x, w, b, targets = operands(64, 128, 256, seed=3, dtype=jnp.bfloat16)
    ones = [np.ones(64, np.float32)] * 4
    (_, stats), (dx, dw, _) = jax.jit(jax.value_and_grad(_weighted(lm_head, targets, ones, lm_head.IDENTITY),
                                                         argnums=(0, 1, 2), has_aux=True))(x, w, None)
    assert_bf16_close(stats, dx, dw, x, w, targets, lm_head.IDENTITY, ones)


@pytest.mark.kernels_ci
def test_the_residual_is_p_in_xs_dtype(kernel, monkeypatch):
    """What the forward keeps for the backward: p [rows padded to the chunk, vocab padded to the lanes] in bf16 and
    the rows' lse, and no float32 [rows, vocab] array (XLA's formulation keeps its float32 logits)."""
    lm_head = kernel.lm_head
    monkeypatch.setattr(lm_head.stored, "CHUNKS", (16,))
    x, w, b, targets = operands(37, 64, 200, seed=5, dtype=jnp.bfloat16)
    _, vjp = jax.vjp(lambda x, w: lm_head.statistics(x, w, None, targets, scheme="stored").entropy, x, w)
    arrays = [a for a in jax.tree.leaves(vjp) if hasattr(a, "shape")]
    wide = [(a.shape, a.dtype) for a in arrays if a.ndim == 2 and a.shape[1] >= 200]
    assert wide == [((48, 256), jnp.bfloat16)], wide


@pytest.mark.kernels_ci
def test_under_a_soft_cap_the_residual_is_the_kept_rows_float32_logits(kernel):
    """A soft cap's one chunk (`stored.KEPT_LOGITS`): the forward keeps the rows' float32 logits [rows padded to 8,
    vocab padded to the lanes] (p in bf16 would not give dz/dl back near the cap), no bf16 [rows, vocab] array; the
    layout's temporaries count them at 4 bytes an entry."""
    lm_head = kernel.lm_head
    cap = lm_head.LogitTransform.of(soft_cap=30.0)
    x, w, b, targets = operands(37, 64, 200, seed=5, dtype=jnp.bfloat16)
    _, vjp = jax.vjp(lambda x, w: lm_head.statistics(x, w, None, targets, cap, scheme="stored").entropy, x, w)
    arrays = [a for a in jax.tree.leaves(vjp) if hasattr(a, "shape")]
    wide = [(a.shape, a.dtype) for a in arrays if a.ndim == 2 and a.shape[1] >= 200]
    assert wide == [((40, 256), jnp.float32)], wide
    stored = lm_head.stored
    logits, x_padded = 40 * 200 * 4, 40 * 64 * 2  # the chunk's float32 logits, x padded to it
    assert stored.temporaries(37, 200, 2, stored.Layout(40, 40, 200), 64, soft_cap=True) == (
        40 * 256 * 4 + logits + stored.P_CHUNKS_OFF_LANES * 40 * 256 * 4 + x_padded)  # the forward's, the larger


@pytest.mark.kernels_ci
def test_targets_outside_the_vocabulary_are_refused_on_the_host_and_nan_when_traced(kernel, monkeypatch):
    lm_head = kernel.lm_head
    monkeypatch.setattr(lm_head.stored, "CHUNKS", (8,))
    x, w, b, targets = operands(16, 64, 200, seed=4)
    wrong = targets.copy()
    wrong[[3, 9]] = [-1, 200]
    with pytest.raises(ValueError, match=r"^tokamax lm_head: targets must be in \[0, 200\); got 2 outside"):
        lm_head.statistics(x, w, b, wrong, scheme="stored")
    ok = np.ones(16, bool)
    ok[[3, 9]] = False

    def masked_log_probs(x, w, b, t):  # noqa: ANN001, ANN202
        s = lm_head.statistics(x, w, b, t, scheme="stored")
        return jnp.where(ok, s.target_logit - s.lse + s.entropy, 0.0).sum(), s

    (_, stats), grads = jax.jit(jax.value_and_grad(masked_log_probs, argnums=(0, 1, 2), has_aux=True))(x, w, b, wrong)
    _, want = jax.jit(jax.value_and_grad(masked_log_probs, argnums=(0, 1, 2), has_aux=True))(
        x, w, b, np.where(ok, wrong, 0))
    for name in lm_head.OUTPUTS:
        got = np.asarray(getattr(stats, name))
        assert np.isnan(got[~ok]).all() and np.isfinite(got[ok]).all(), name
    for name, got, expected in zip(("dx", "dw", "db"), grads, want, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=name)


@pytest.mark.kernels_ci
def test_what_the_scheme_cannot_take_is_refused_naming_it(kernel):
    lm_head = kernel.lm_head
    x, w, b, targets = operands(8, 64, 200, seed=6)
    cap = lm_head.LogitTransform.of(soft_cap=30.0)
    with pytest.raises(ValueError, match=r"tokamax lm_head: the stored scheme keeps a multiple of its chunk \(8\) up "
                       r"to 8 rows, got 4"):
        lm_head.statistics(x, w, b, targets, scheme="stored", layout=lm_head.stored.Layout(8, 4, 256))
    with pytest.raises(ValueError, match=r"tokamax lm_head: scheme must be one of \('auto', 'kernels', 'stored'\), "
                       r"got 'xla'"):
        lm_head.statistics(x, w, b, targets, scheme="xla")
    assert lm_head.stats.stored_layout(8, 64, 200, 4, cap).kept == 8  # one chunk keeps its logits under a soft cap


@pytest.mark.kernels_ci
def test_the_layout_keeps_the_rows_an_eighth_of_hbm_holds_at_the_least_modelled_cost(kernel):
    """On the v5e at Qwen3 8B's head: 2,048 rows keep every row's p in chunks of 1024 (0.61 GiB measured), 8,192 rows
    keep 5,632 in chunks of 512 (1.72 GiB measured, the fastest of the four layouts timed: 217.0 ms against XLA's
    211.3), in steps of 8,192 and 2,048 columns (G at most 2^24 entries); a soft cap none past one chunk; where dx's
    accumulator alone is past the share no layout fits. The compile-only v7x also copies the weight and x. x split
    between the kept rows' chunks and the others is copied by chunks; at a vocabulary off the lanes (Gemma 3's) a kept
    chunk holds two chunks of p beside its logits (`P_CHUNKS_OFF_LANES`, what libtpu lays out: tests/tpu_compile)."""
    from tools.chip import predict

    stored, v5e = kernel.lm_head.stored, predict.v5e(kernel)
    vocab, hidden, share = 151936, 4096, v5e.hbm // kernel.lm_head.cost.HBM_SHARE
    assert [stored.step_columns(r, vocab) for r in (2048, 8192, 16384, 10 ** 6)] == [8192, 2048, 1024, 512]
    assert stored.step_columns(8, 200) == 256  # one step over a narrow vocabulary
    lay = stored.Layout(512, 5632, 2048)
    p, logits, backward = 5632 * vocab * 2, 512 * vocab * 4, 8192 * hidden * 4 + 4 * 8192 * 2048
    x_chunks = 8192 * hidden * 2  # x by chunks: split between the kept rows and the others
    assert stored.temporaries(8192, vocab, 2, lay, hidden) == p + max(logits + x_chunks, backward)
    assert stored.temporaries(8192, vocab, 2, lay._replace(kept=8192), hidden) == 8192 * vocab * 2 + logits
    copied = (vocab + 8192) * hidden * 2  # the weight and x
    assert stored.temporaries(8192, vocab, 2, lay, hidden, "TPU7x") == p + copied + logits + x_chunks + backward
    gemma, width = 262208, 262272  # off the lanes: p rounded to them, and two chunks of it beside the logits
    assert stored.temporaries(8192, gemma, 2, stored.Layout(1024, 3072, 2048), 5376) == (
        3072 * width * 2 + 1024 * gemma * 4 + 2 * 1024 * width * 2 + 8192 * 5376 * 2)
    assert stored.temporaries(8192, gemma, 2, stored.Layout(1024, 0, 2048), 5376) == 1024 * gemma * 4  # x not split
    assert stored.layout(2048, vocab, 2, v5e, hidden) == stored.Layout(1024, 2048, 8192)
    assert stored.layout(8192, vocab, 2, v5e, hidden) == lay
    assert stored.temporaries(8192, vocab, 2, lay, hidden) <= share
    assert stored.temporaries(8192, vocab, 2, lay._replace(kept=lay.kept + 512), hidden) > share
    assert stored.layout(8192, vocab, 2, v5e, hidden, soft_cap=True).kept == 0
    assert stored.layout(200_000, vocab, 2, v5e, hidden) is None  # dx's accumulator: 3.1 GiB
    assert stored.smallest(37, 300) == stored.Layout(40, 0, 384)


@pytest.mark.kernels_ci
def test_the_default_takes_the_stored_scheme_where_it_fits_and_the_kernels_elsewhere(kernel, emulation):
    """`statistics`' default ("auto", `stats.choose_scheme`): on the v5e at Qwen3 8B's head the stored scheme at
    2,048 rows (57.8 ms against the kernels' 73.7) and 8,192 (217.0 against 288.9), and under a soft cap (no row
    kept); the kernels where no layout fits the share; called, the default gives what the scheme it names gives, bit
    for bit."""
    from tools.chip import predict

    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    choose, cap = lm_head.stats.choose_scheme, lm_head.LogitTransform.of(soft_cap=30.0)
    assert choose(2048, 4096, 151936, 2, on=v5e) == "stored"
    assert choose(8192, 4096, 151936, 2, on=v5e) == "stored"
    assert choose(2048, 4096, 151936, 2, cap, on=v5e) == "stored"
    assert choose(200_000, 4096, 151936, 2, on=v5e) == "kernels"
    x, w, b, targets = operands(40, 64, 200, seed=8)
    for transform in (lm_head.IDENTITY, cap):
        scheme = choose(40, 64, 200, 4, transform)

        def loss(x, w, b, scheme, transform=transform):  # noqa: ANN001, ANN202
            s = lm_head.statistics(x, w, b, targets, transform, **scheme)
            return -(s.target_logit - s.lse).sum() + s.entropy.sum()

        with emulation.interpret_on_cpu("v6e"):
            got = jax.value_and_grad(loss, (0, 1, 2))(x, w, b, {})
            want = jax.value_and_grad(loss, (0, 1, 2))(x, w, b, {"scheme": scheme})
        for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(e), err_msg=scheme)


@pytest.mark.kernels_ci
def test_no_rows_give_empty_statistics_and_zero_weight_gradients(kernel):
    """A call with no rows (an empty micro-batch) by the default, which takes the stored scheme there: empty
    statistics, an empty dx, and zero dw and db, as the kernels give."""
    lm_head = kernel.lm_head
    _, w, b, _ = operands(8, 64, 200, seed=9)
    x, targets = np.zeros((0, 64), np.float32), np.zeros((0,), np.int32)
    assert lm_head.stats.choose_scheme(0, 64, 200, 4) == "stored"

    def loss(x, w, b):  # noqa: ANN001, ANN202
        s = lm_head.statistics(x, w, b, targets)
        return (s.lse - s.target_logit + s.entropy).sum()

    value, (dx, dw, db) = jax.value_and_grad(loss, (0, 1, 2))(x, w, b)
    assert float(value) == 0.0 and dx.shape == (0, 64)
    assert not np.asarray(dw).any() and not np.asarray(db).any()


@pytest.mark.kernels_ci
def test_rows_of_one_chunk_take_the_backward_in_one_step(kernel):
    """Where the rows are one forward chunk (at most 1,024), the layout of one backward step over the whole
    vocabulary (`stored.WHOLE`: XLA's formulation with p kept) is offered and taken on the v5e: at 256 rows the zoo
    timed steps of 8,192 columns 12.33 ms against XLA's 7.15 at Qwen2.5 7B's head, 32.52 against 14.31 at Qwen2.5
    72B's. 2,048 rows and more keep their layouts (`STEP_ENTRIES`)."""
    from tools.chip import predict

    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    for hidden in (3584, 8192):
        assert lm_head.stats.choose_layout(256, hidden, 152064, 2, on=v5e) == lm_head.stored.Layout(256, 256, 152064)
    # under a soft cap the rows' float32 logits (`stored.KEPT_LOGITS`), past one chunk none
    assert lm_head.stored.layout(256, 256000, 2, v5e, 3584, soft_cap=True) == lm_head.stored.Layout(256, 256, 256000)
    assert lm_head.stored.layout(2048, 256000, 2, v5e, 2304, soft_cap=True).kept == 0
    assert lm_head.stored.layout(2048, 151936, 2, v5e, 4096) == lm_head.stored.Layout(1024, 2048, 8192)
