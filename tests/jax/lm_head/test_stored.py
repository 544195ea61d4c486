"""`lm_head.statistics(..., scheme="stored")` (`lm_head.stored`: plain XLA over chunks of rows, the softmax kept for
the backward) against float64 numpy: the seven statistics and the gradients of a weighted sum of the differentiable
ones, with a bias and without, a scale and a temperature, rows that pad the last chunk, several chunks, one chunk
(fewer rows than a chunk), bf16; targets outside the vocabulary (refused on the host, NaN rows traced that pass no
gradient); the refusals (a soft cap, an unknown scheme); the backward's residual p in x's dtype and no float32
[rows, vocab] array beside it."""

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


@pytest.mark.kernels_ci
def test_bf16_operands(kernel, monkeypatch):
    """bf16 x and w (the reference takes the same bf16 values): float32 logits, so the statistics are as exact as
    for float32; p is kept in bf16 (2^-9 relative) and the gradient G rounded once more to bf16 before its matmuls
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
    """What the forward keeps for the backward: p [rows padded to the chunk, vocab] in bf16, and no float32
    [rows, vocab] array (XLA's formulation keeps its float32 logits)."""
    lm_head = kernel.lm_head
    monkeypatch.setattr(lm_head.stored, "CHUNKS", (16,))
    x, w, b, targets = operands(37, 64, 200, seed=5, dtype=jnp.bfloat16)
    _, vjp = jax.vjp(lambda x, w: lm_head.statistics(x, w, None, targets, scheme="stored").entropy, x, w)
    arrays = [a for a in jax.tree.leaves(vjp) if hasattr(a, "shape")]
    wide = [(a.shape, a.dtype) for a in arrays if a.ndim == 2 and a.shape[1] == 200]
    assert wide == [((48, 200), jnp.bfloat16)], wide


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
    with pytest.raises(ValueError, match=r"tokamax lm_head: scheme='stored' takes no soft cap"):
        lm_head.statistics(x, w, b, targets, lm_head.LogitTransform.of(soft_cap=30.0), scheme="stored")
    with pytest.raises(ValueError, match=r"tokamax lm_head: scheme must be one of \('auto', 'kernels', 'stored'\), "
                       r"got 'xla'"):
        lm_head.statistics(x, w, b, targets, scheme="xla")


@pytest.mark.kernels_ci
def test_the_chunk_is_the_largest_whose_temporaries_fit_an_eighth_of_hbm(kernel):
    """p, G and one chunk's float32 logits, beside each other on a chip not laid out: at Qwen3 8B's head and 2,048
    rows 0.58 GiB each, chunks of 1024 fit a 16 GiB chip's 2 GiB share; at 2,560 rows 512; at 4,096 nothing does
    (p and G alone are 2.32 GiB), so the smallest. On the v5e, whose compiler puts the logits in G's buffer (1.159
    GiB measured at 2,048 rows), p and G alone: chunks of 1024 at 2,560 rows too."""
    from tools.chip import predict

    stored, v5e = kernel.lm_head.stored, predict.v5e(kernel)
    other = v5e._replace(kind="")
    assert stored.temporaries(2048, 151936, 2, 1024) == 2 * 2048 * 151936 * 2 + 1024 * 151936 * 4
    assert stored.temporaries(37, 200, 2, 16) == 2 * 48 * 200 * 2 + 16 * 200 * 4
    assert stored.temporaries(2048, 151936, 2, 1024, 4096, v5e.kind) == 2 * 2048 * 151936 * 2
    assert stored.chunk(2048, 151936, 2, other, 4096) == 1024
    assert stored.chunk(2560, 151936, 2, other, 4096) == 512
    assert stored.chunk(2560, 151936, 2, v5e, 4096) == 1024
    assert stored.chunk(4096, 151936, 2, other, 4096) == 256 and stored.chunk(5, 200, 2, other) == 8
    # where the compiler copies the weight into G's buffer first (the compile-only v7x), the larger of the two
    p, weight = 2048 * 151936 * 2, 151936 * 4096 * 2
    assert stored.temporaries(2048, 151936, 2, 1024, 4096, "TPU7x") == p + weight + 1024 * 151936 * 4


@pytest.mark.kernels_ci
def test_the_default_takes_the_stored_scheme_where_it_fits_and_the_kernels_elsewhere(kernel, emulation):
    """`statistics`' default ("auto", `stats.choose_scheme`): on the v5e at Qwen3 8B's head the stored scheme up to
    the rows whose p and G fit the share (2,048 rows: 1.16 GiB, where it ran in 56.1 ms against the kernels' 73.8),
    the kernels past it (4,096 rows: 2.32 GiB) and wherever there is a soft cap; called, the default gives what
    the scheme it names gives, bit for bit."""
    from tools.chip import predict

    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    choose = lm_head.stats.choose_scheme
    assert choose(2048, 4096, 151936, 2, on=v5e) == "stored"
    assert choose(3456, 4096, 151936, 2, on=v5e) == "kernels"
    assert choose(2048, 4096, 151936, 2, lm_head.LogitTransform.of(soft_cap=30.0), on=v5e) == "kernels"
    x, w, b, targets = operands(40, 64, 200, seed=8)
    for transform, scheme in ((lm_head.IDENTITY, "stored"), (lm_head.LogitTransform.of(soft_cap=30.0), "kernels")):
        assert choose(40, 64, 200, 4, transform) == scheme

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
