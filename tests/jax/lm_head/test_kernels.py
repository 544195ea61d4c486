"""`tokamax.lm_head` (our LM-head kernels) in Pallas TPU interpret mode against float64 numpy: the
seven per-row statistics (in their old positions, the entropy last) and the gradients of a weighted sum
of the differentiable ones, with a bias and without (`statistics` too), for every logit transform the
models and TRL use (none, a scale, a soft cap with a temperature), at sizes off the lanes (the masked
vocabulary columns, the padded rows), bf16, and ties for top-1; padded rows at logits that overflow
e^z; the entropy of confident rows (logits ~40) within float32's own bound; targets outside the
vocabulary (refused on the host, NaN rows traced); lowered for v5e, v6e and v7x (one kernel forward,
two backward, no [rows, vocab] array in the module); the block choice within VMEM, and the refusal of
what cannot fit; the kernels on x.T and w.T (a hidden size off the lanes) as exact as on x and w."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .numerics import U, confident_logits, entropy_bound
from .reference import assert_bf16_close, gradients, operands, reference

# f32 operands, exact f32 matmuls in interpret mode: tiled summation order and the online softmax only
# (~1e-6 relative); sum_logits adds vocab terms of O(1), dw sums rows of O(1)
TOL = dict(rtol=2e-5, atol=5e-5)
TRANSFORMS = {"plain": dict(), "scale": dict(scale=0.125), "cap-temperature": dict(scale=1.5, soft_cap=3.0,
                                                                                   temperature=0.7)}


def _stats_and_gradients(lm_head, emulation, x, w, b, targets, t, cotangents):  # noqa: ANN001, ANN202
    """The kernels' statistics and their VJP for `cotangents`, in interpret mode as v6e."""
    def run(x, w, b):  # noqa: ANN001, ANN202
        stats = lm_head.row_stats(x, w, b, targets, t)
        return stats, lm_head.row_stats_vjp(x, w, b, targets, stats.lse, stats.entropy, *cotangents, t)

    with emulation.interpret_on_cpu("v6e"):
        return jax.jit(run)(x, w, b)


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize(("rows", "hidden", "vocab", "bias"), [(37, 64, 200, True), (300, 128, 384, False)])
def test_statistics_and_gradients_match_float64(kernel, emulation, transform, rows, hidden, vocab, bias):
    lm_head = kernel.lm_head
    t = lm_head.LogitTransform.of(**TRANSFORMS[transform])
    x, w, b, targets = operands(rows, hidden, vocab, seed=rows + vocab)
    b = b if bias else None
    r = np.random.default_rng(1)
    cotangents = [r.standard_normal(rows).astype(np.float32) for _ in range(4)]
    stats, (dx, dw, db) = _stats_and_gradients(lm_head, emulation, x, w, b, targets, t, cotangents)
    want, _, _, _ = reference(x, w, b, targets, t)
    for name in lm_head.OUTPUTS:
        np.testing.assert_allclose(np.asarray(getattr(stats, name)), want[name], err_msg=name, **TOL)
    want_dx, want_dw, want_db = gradients(x, w, b, targets, t, cotangents)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype and db.shape == (vocab,)
    for name, got, expected in (("dx", dx, want_dx), ("dw", dw, want_dw), ("db", db, want_db)):
        np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, rtol=1e-4, atol=1e-4)


@pytest.mark.kernels_ci
def test_the_outputs_keep_their_old_positions(kernel, emulation):
    """The third statistic was the mean logit E_p[z] and became the entropy, so a caller unpacking by position
    got the entropy silently: the six keep their old places (lse, target_logit, mean_logit, log_sum_sq_probs,
    sum_logits, top1) and the entropy comes last; the mean logit is differentiable, d E_p[z]/dz_j = p_j (1 +
    z_j - E_p[z]) (float64's)."""
    lm_head = kernel.lm_head
    assert lm_head.OUTPUTS == ("lse", "target_logit", "mean_logit", "log_sum_sq_probs", "sum_logits", "top1",
                               "entropy")
    assert lm_head.RowStats._fields == lm_head.OUTPUTS
    x, w, b, targets = operands(37, 64, 200, seed=13)
    g = np.random.default_rng(4).standard_normal(37).astype(np.float32)
    with emulation.interpret_on_cpu("v6e"):
        out = jax.jit(lm_head.row_stats)(x, w, b, targets)

        def third(x, w, b):  # noqa: ANN001, ANN202
            return (g * lm_head.statistics(x, w, b, targets, scheme="kernels")[2]).sum()

        dx, dw, db = jax.jit(jax.grad(third, argnums=(0, 1, 2)))(x, w, b)
    lse, target_logit, mean_logit, log_sum_sq_probs, sum_logits, top1, entropy = out
    want, z, p, _ = reference(x, w, b, targets, lm_head.IDENTITY)
    for name, got in (("lse", lse), ("mean_logit", mean_logit), ("sum_logits", sum_logits), ("entropy", entropy)):
        np.testing.assert_allclose(np.asarray(got), want[name], err_msg=name, **TOL)
    g_z = g[:, None] * p * (1 + z - want["mean_logit"][:, None])
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    for name, got, expected in (("dx", dx, g_z @ w64), ("dw", dw, g_z.T @ x64), ("db", db, g_z.sum(0))):
        np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, rtol=1e-4, atol=1e-4)


def test_statistics_of_a_head_without_a_bias_differentiate(kernel, emulation):
    """`statistics(x, w, None, t)` passed its checks and failed in the backward (the bias's cotangent cast to
    the dtype of a bias that is None): now its gradients in x and w are float64's, and the bias gets none."""
    lm_head = kernel.lm_head
    x, w, _, targets = operands(37, 64, 200, seed=12)
    r = np.random.default_rng(3)
    cotangents = [r.standard_normal(37).astype(np.float32) for _ in range(4)]

    def weighted(x, w, b):  # noqa: ANN001, ANN202
        s = lm_head.statistics(x, w, b, targets, scheme="kernels")
        return sum((g * v).sum() for g, v in zip(cotangents, (s.lse, s.target_logit, s.entropy, s.sum_logits),
                                                   strict=True))

    with emulation.interpret_on_cpu("v6e"):
        dx, dw, db = jax.jit(jax.grad(weighted, argnums=(0, 1, 2)))(x, w, None)
    want_dx, want_dw, _ = gradients(x, w, None, targets, lm_head.IDENTITY, cotangents)
    assert db is None
    for name, got, expected in (("dx", dx, want_dx), ("dw", dw, want_dw)):
        np.testing.assert_allclose(np.asarray(got), expected, err_msg=name, rtol=1e-4, atol=1e-4)


def test_bf16_operands(kernel, emulation):
    """bf16 x and w (the reference takes the same bf16 values): float32 accumulators, so the statistics are
    as exact as for f32; the gradient block enters the MXU in bf16 (as TRL rounds its tiles to the compute
    dtype) and the gradients come back in bf16: errors of 2^-8 of the largest gradient, not of each."""
    lm_head = kernel.lm_head
    x, w, b, targets = operands(64, 128, 256, seed=3, dtype=jnp.bfloat16)
    t = lm_head.LogitTransform.of(soft_cap=30.0)
    ones = [np.ones(64, np.float32)] * 4
    with emulation.interpret_on_cpu("v6e"):
        stats = jax.jit(lambda x, w: lm_head.row_stats(x, w, None, targets, t))(x, w)
        dx, dw, _ = jax.jit(lambda x, w, lse, m: lm_head.row_stats_vjp(x, w, None, targets, lse, m, *ones, t))(
            x, w, stats.lse, stats.entropy)
    assert_bf16_close(stats, dx, dw, x, w, targets, t, ones)


@pytest.mark.kernels_ci
def test_top1_is_the_first_maximum(kernel, emulation):
    """Two columns share a row's maximum: the target on the first is top-1, on the second not (TRL's rule,
    and argmax's), across a vocabulary block boundary too."""
    lm_head = kernel.lm_head
    hidden, vocab = 128, 2048  # vocabulary blocks of 1024
    x = np.zeros((4, hidden), np.float32)
    x[:2, 0] = x[2:, 1] = 1.0
    w = np.zeros((vocab, hidden), np.float32)
    w[[5, 9], 0] = 2.0  # rows 0/1: columns 5 and 9 tie
    w[[100, 1500], 1] = 2.0  # rows 2/3: columns 100 and 1500 (the next block) tie
    targets = np.array([5, 9, 100, 1500], np.int32)
    with emulation.interpret_on_cpu("v6e"):
        stats = jax.jit(lambda x, w: lm_head.row_stats(x, w, None, targets))(x, w)
    assert np.asarray(stats.top1).tolist() == [1.0, 0.0, 1.0, 0.0]


def _lower(kernel, emulation, chip, fn, *specs):  # noqa: ANN001, ANN002, ANN202
    with emulation.emulated_chip(chip), jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        return jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",)).as_text()


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_lowers_for_each_chip_without_logits(kernel, emulation, chip):
    """At a real size (16,384 tokens, hidden 4096, Qwen's 151,936 vocabulary, bf16): the forward one Mosaic
    kernel, the backward two, and no [rows, vocab] array anywhere in either module."""
    lm_head = kernel.lm_head
    sd = jax.ShapeDtypeStruct
    rows, hidden, vocab = 16384, 4096, 151936
    specs = (sd((rows, hidden), jnp.bfloat16), sd((vocab, hidden), jnp.bfloat16), sd((vocab,), jnp.float32),
             sd((rows,), jnp.int32))
    row = sd((rows,), jnp.float32)
    t = lm_head.LogitTransform.of(soft_cap=30.0, temperature=0.7)
    # the kernel asked for by its plan: by default past 1,024 rows the forward is XLA's in chunks (`stats.xla_forward`)
    forward = _lower(kernel, emulation, chip, lambda x, w, *a: lm_head.row_stats(
        x, w, *a, t, plan=lm_head.stats.plan_for(x, w)), *specs)
    backward = _lower(kernel, emulation, chip, lambda *a: lm_head.row_stats_vjp(*a, t), *specs, *[row] * 6)
    assert forward.count("tpu_custom_call") == 1 and backward.count("tpu_custom_call") == 2
    for module in (forward, backward):
        assert not re.search(rf"tensor<{rows}x{vocab}x", module) and not re.search(rf"tensor<{vocab}x{rows}x", module)
        assert "tokamax_lm_head" in module


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_each_kernel_gets_wide_blocks_within_half_the_vmem_at_or_above_the_ridge(kernel, emulation, chip):
    """The issue's goal, from the cost model: at 16,384 tokens, hidden 4096, bf16, every kernel's blocks fit
    half the chip's VMEM, its vocabulary blocks are at least 512 wide, and its arithmetic intensity is at or
    above the chip's ridge point (peak flops over HBM bandwidth, libtpu's figures)."""
    lm_head = kernel.lm_head
    with emulation.emulated_chip(chip):
        on = lm_head.cost.chip()
    for vocab in (151936, 128256):
        plan = lm_head.plan.choose(16384, 4096, vocab, 2, on)
        assert plan.rows == 16384
        for name, c in plan.costs(4096, vocab, 2).items():
            assert c.vmem_bytes <= on.vmem // 2, (vocab, name, plan[name])
            assert plan[name].vocab >= 512, (vocab, name, plan[name])
            assert c.arithmetic_intensity >= on.ridge, (vocab, name, plan[name], c.arithmetic_intensity, on.ridge)
            assert c.mxu_fill(on.mxu) == 1.0


@pytest.mark.kernels_ci
def test_plans_pad_rows_once_and_refuse_what_cannot_fit(kernel, emulation):
    lm_head = kernel.lm_head
    with emulation.emulated_chip("v7x"):
        v7x = lm_head.cost.chip()
    small = lm_head.plan.choose(37, 64, 200, 4, v7x)
    assert small.rows == 128 and all(small[k].rows == 128 for k in ("forward", "backward_x", "backward_w"))
    assert all(small[k].vocab == 128 for k in ("forward", "backward_x", "backward_w"))  # no block wider than w
    odd = lm_head.plan.choose(1000, 4096, 151936, 2, v7x)
    assert all(odd.rows % odd[k].rows == 0 for k in ("forward", "backward_x", "backward_w"))
    # hidden 16,384 on v7x: the whole hidden size in each block, at blocks within the compile limit
    big = lm_head.plan.choose(16384, 16384, 128256, 2, v7x)
    for name, c in big.costs(16384, 128256, 2).items():
        assert c.vmem_bytes <= lm_head.blocks.vmem_limit(v7x.vmem), name
    with pytest.raises(ValueError, match=r"tokamax lm_head: a hidden size of 131072 needs \d+ bytes of VMEM at the "
                                         r"smallest blocks \(128 rows x 128 vocabulary\), over the \d+ the kernels "
                                         r"may use of this chip's \d+ \(the forward kernel"):
        lm_head.plan.choose(16384, 131072, 151936, 2, v7x)


@pytest.mark.parametrize(("hidden", "transposed"), [(128, False), (192, True)], ids=["x-w", "transposed"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_wide_blocks_over_an_odd_vocabulary_read_the_last_block_in_place(kernel, emulation, dtype, hidden,
                                                                         transposed):
    """Each kernel its own blocks, 512-wide vocabulary blocks over a vocabulary of 1,000 (the last block 24
    columns past the weight, NaN in interpret mode): every statistic and gradient as float64's, so nothing
    past the vocabulary enters a sum, wins top-1 or reaches dx, dw or db. On x and w, and on x.T and w.T
    (hidden 192, off the lanes: the last block's columns of w.T past the vocabulary, the padded rows'
    columns of x.T)."""
    lm_head = kernel.lm_head
    rows, vocab = 300, 1000
    x, w, b, targets = operands(rows, hidden, vocab, seed=11, dtype=dtype)
    targets[:4] = [vocab - 1, vocab - 24, 0, 511]
    blocks = lm_head.Blocks
    plan = lm_head.Plan(512, blocks(256, 512), blocks(512, 512), blocks(128, 1024), transposed)
    assert lm_head.plan.transposed(hidden) == transposed
    t = lm_head.LogitTransform.of(scale=1.5, soft_cap=3.0, temperature=0.7)
    r = np.random.default_rng(2)
    cotangents = [r.standard_normal(rows).astype(np.float32) for _ in range(4)]

    def run(x, w, b):  # noqa: ANN001, ANN202
        stats = lm_head.row_stats(x, w, b, targets, t, plan=plan)
        return stats, lm_head.row_stats_vjp(x, w, b, targets, stats.lse, stats.entropy, *cotangents, t, plan=plan)

    with emulation.interpret_on_cpu("v6e"):
        stats, (dx, dw, db) = jax.jit(run)(x, w, b)
    want, _, _, _ = reference(x, w, b, targets, t)
    for name in lm_head.OUTPUTS:
        np.testing.assert_allclose(np.asarray(getattr(stats, name)), want[name], err_msg=name, **TOL)
    want_dx, want_dw, want_db = gradients(x, w, b, targets, t, cotangents)
    assert dw.shape == (vocab, hidden) and db.shape == (vocab,)
    g_abs = np.abs(gradients(x, w, b, targets, t, cotangents, g_raw_only=True))
    # float32 sums of n terms: errors of about sqrt(n) u of the terms' magnitudes (plus the few u of each
    # term's own rounding); bf16: the gradient block enters the MXU in bf16 (test_bf16_operands)
    unit = U if dtype == np.float32 else 2.0 ** -8
    w_abs, x_abs = np.abs(np.asarray(w, np.float64)), np.abs(np.asarray(x, np.float64))
    scales = {"dx": (g_abs @ w_abs, vocab), "dw": (g_abs.T @ x_abs, rows), "db": (g_abs.sum(0), rows)}
    for name, got, expected in (("dx", dx, want_dx), ("dw", dw, want_dw), ("db", db, want_db)):
        got = np.asarray(got, np.float64)
        scale, n = scales[name]
        bound = (np.sqrt(n) + 8) * (U if name == "db" else unit) * scale + 1e-30
        assert np.isfinite(got).all(), name
        assert (np.abs(got - expected) <= bound).all(), (name, float((np.abs(got - expected) / bound).max()))


def test_the_kernels_run_on_the_transposes_where_the_hidden_size_is_off_the_lanes(kernel, emulation):
    """hidden 2880 (gpt-oss's; the TPU keeps such arrays column-major): the plan is transposed, each kernel is
    its `_t` variant in the lowered module, and the step's gradients come back as [rows, hidden] and [vocab,
    hidden]; hidden 4096 keeps x and w as they are."""
    lm_head = kernel.lm_head
    with emulation.emulated_chip("v6e"):
        on = lm_head.cost.chip()
    assert lm_head.plan.choose(8192, 2880, 201088, 2, on).transposed
    assert not lm_head.plan.choose(8192, 4096, 201088, 2, on).transposed
    sd = jax.ShapeDtypeStruct
    rows, hidden, vocab = 1024, 2880, 201088
    specs = (sd((rows, hidden), jnp.bfloat16), sd((vocab, hidden), jnp.bfloat16), sd((vocab,), jnp.float32),
             sd((rows,), jnp.int32))

    def step(x, w, b, t):  # noqa: ANN001, ANN202
        return jax.grad(lambda x, w: lm_head.statistics(x, w, b, t, scheme="kernels").lse.sum(), argnums=(0, 1))(x, w)

    module = _lower(kernel, emulation, "v6e", step, *specs)
    names = re.findall(r"tokamax_lm_head_(fwd|dx|dw)_r\d+_v\d+(_t)?", module)
    assert sorted({n for n, _ in names}) == ["dw", "dx", "fwd"] and all(t == "_t" for _, t in names), names
    assert re.search(rf"-> \(tensor<{rows}x{hidden}xbf16>.*tensor<{vocab}x{hidden}xbf16>", module)


# libtpu's "Program vmem requirement" (MiB, spill slots included) of one kernel alone at (rows block, vocabulary
# block, hidden) in bf16, read from its out-of-VMEM errors on v7x (tools/tpu_compile; issue 43), with each step's
# body over its whole block (as `Blocks(..., compute=vocab)` still runs it).
COMPILER_VMEM_MIB = [("backward_w", 128, 128, 32768, 72.04), ("backward_x", 128, 128, 32768, 72.03),
                     ("backward_w", 512, 128, 16384, 73.13), ("backward_w", 128, 512, 16384, 108.36),
                     ("backward_x", 512, 128, 16384, 109.02), ("backward_x", 128, 512, 16384, 72.08),
                     ("backward_w", 512, 1024, 8192, 122.28), ("backward_x", 512, 1024, 8192, 98.42),
                     ("forward", 512, 1024, 16384, 112.80), ("forward", 512, 128, 32768, 80.52)]


# The same on x.T and w.T (`kernels`' transposed variant; the hidden sizes off the lanes where they apply).
COMPILER_VMEM_MIB_TRANSPOSED = [
    ("backward_x", 128, 128, 32704, 63.98), ("backward_w", 128, 128, 32704, 63.98),
    ("backward_x", 512, 128, 16320, 104.74), ("backward_w", 128, 512, 16320, 104.03),
    ("backward_x", 256, 1024, 8192, 77.76), ("backward_x", 512, 512, 8192, 77.96),
    ("backward_x", 512, 1024, 8192, 106.44), ("backward_w", 512, 1024, 8192, 126.31),
    ("backward_x", 512, 2048, 8192, 155.45), ("backward_w", 512, 2048, 8192, 223.41),
    ("backward_x", 1024, 1024, 8192, 161.61), ("backward_w", 1024, 1024, 8192, 164.17),
    ("forward", 1024, 1024, 8192, 81.98), ("forward", 1024, 2048, 4096, 64.70), ("forward", 512, 2048, 8192, 90.85),
    ("forward", 512, 1024, 16320, 112.44), ("forward", 512, 128, 32704, 80.75)]


# The same with each step's body looping over its block 256 columns at a time (`Blocks(..., compute=256)`; the
# figures above are of the bodies over the whole block, `compute=vocab`, what the default 1024 is at blocks up to
# 1024): (kernel, rows block, vocabulary block, hidden, transposed, MiB), libtpu's scoped allocation on v7x at a
# 1 MiB limit (tools/tpu_compile's libtpu, issue 52).
COMPILER_VMEM_MIB_LOOPED = [
    ("backward_w", 128, 512, 16384, False, 100.10), ("backward_w", 512, 1024, 8192, False, 105.08),
    ("backward_x", 512, 1024, 8192, False, 68.92), ("forward", 512, 1024, 16384, False, 65.34),
    ("backward_w", 128, 512, 16320, True, 103.75), ("backward_x", 512, 512, 8192, True, 65.14),
    ("backward_x", 512, 1024, 8192, True, 85.14), ("backward_w", 512, 1024, 8192, True, 118.82),
    ("backward_x", 512, 2048, 8192, True, 117.14), ("backward_w", 512, 2048, 8192, True, 214.83),
    ("backward_x", 1024, 1024, 8192, True, 86.36), ("backward_w", 1024, 1024, 8192, True, 115.31),
    ("forward", 512, 2048, 8192, True, 81.74), ("forward", 512, 1024, 16320, True, 97.36)]


@pytest.mark.kernels_ci
def test_the_vmem_estimate_covers_the_looped_bodies_too(kernel):
    """The loop over columns holds less than the whole block's body at most blocks (a [rows, 256] block of
    logits at a time), more at one (dw at 1024 x 1024 on x.T: 115.3 MiB against 100.1); the estimate, made for
    the whole-block bodies, stays above every figure."""
    blocks = kernel.lm_head.blocks
    for name, rows, vocab, hidden, transposed, mib in COMPILER_VMEM_MIB_LOOPED:
        assert kernel.lm_head.kernels._width(name, blocks.Blocks(rows, vocab, compute=256)) < vocab  # the loop runs
        estimate = blocks.Blocks(rows, vocab).kernel_vmem_bytes(name, hidden, 2, transposed=transposed) / 2**20
        assert estimate >= mib, (name, rows, vocab, hidden, transposed, estimate, mib)


@pytest.mark.kernels_ci
def test_the_vmem_estimate_of_the_transposed_kernels_covers_the_compilers_figures(kernel):
    """Never below what libtpu allocates on x.T and w.T; at the smallest blocks within 15% of it (the
    estimate keeps the row-major spill libtpu does not make there: `blocks.TRANSPOSED_TEMPORARIES`)."""
    blocks = kernel.lm_head.blocks
    for name, rows, vocab, hidden, mib in COMPILER_VMEM_MIB_TRANSPOSED:
        estimate = blocks.Blocks(rows, vocab).kernel_vmem_bytes(name, hidden, 2, transposed=True) / 2**20
        assert estimate >= mib, (name, rows, vocab, hidden, estimate, mib)
        if rows == vocab == 128:
            assert estimate <= 1.15 * mib, (name, hidden, estimate, mib)


@pytest.mark.kernels_ci
def test_the_vmem_estimate_covers_the_compilers_figures_closely(kernel):
    """Never below what libtpu allocates (a call the kernel accepts must compile), and at the smallest
    blocks, where the hidden size is refused, within 2% of it (a hidden size it can compile is not refused)."""
    blocks = kernel.lm_head.blocks
    for name, rows, vocab, hidden, mib in COMPILER_VMEM_MIB:
        estimate = blocks.Blocks(rows, vocab).kernel_vmem_bytes(name, hidden, 2) / 2**20
        assert estimate >= mib, (name, rows, vocab, hidden, estimate, mib)
        if rows == vocab == 128:
            assert estimate <= 1.02 * mib, (name, hidden, estimate, mib)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "message"), [
    (lambda lm, x, w, t: lm.row_stats(x, w[:, :64], None, t), r"x must be \[rows, hidden\] and w \[vocab, hidden\]"),
    (lambda lm, x, w, t: lm.row_stats(x, w.astype(jnp.bfloat16), None, t), "x and w must share a dtype"),
    (lambda lm, x, w, t: lm.row_stats(x, w, None, t[:3]), r"targets must be \[rows\]"),
    (lambda lm, x, w, t: lm.row_stats(x, w, jnp.zeros(7), t), r"the bias must be \[vocab\]"),
    (lambda lm, x, w, t: lm.LogitTransform.of(temperature=0.0), "temperature must be > 0"),
    (lambda lm, x, w, t: lm.LogitTransform.of(soft_cap=-1.0), "soft_cap must be > 0 or None"),
])
def test_bad_calls_name_the_kernel_and_the_argument(kernel, call, message):
    x, w = jnp.zeros((8, 128)), jnp.zeros((256, 128))
    with pytest.raises((ValueError, TypeError), match=message) as info:
        call(kernel.lm_head, x, w, jnp.zeros(8, jnp.int32))
    assert str(info.value).startswith("tokamax lm_head: ")


def test_padded_rows_add_nothing_to_the_gradients_at_a_large_bias_and_low_temperature(kernel, emulation):
    """37 rows, padded to the 128-row block inside: a padded (zero) row's logits are transform(bias), here
    10 / 0.1 = 100, and e^100 overflows float32; the padded rows must add exactly nothing to dw and db (before:
    their lse was padded with 0, so p = e^100 = inf and 0 * inf put NaN in dw and db)."""
    lm_head = kernel.lm_head
    rows, hidden, vocab = 37, 64, 256
    x, w, b, targets = operands(rows, hidden, vocab, seed=11)
    x = (x / 10).astype(np.float32)  # raw logits 10 +- ~0.3, so z = 100 +- ~3: a softmax of moderate spread
    b = (10.0 + b / 2.5).astype(np.float32)
    t = lm_head.LogitTransform.of(temperature=0.1)
    r = np.random.default_rng(2)
    cotangents = [r.standard_normal(rows).astype(np.float32) for _ in range(4)]
    stats, grads = _stats_and_gradients(lm_head, emulation, x, w, b, targets, t, cotangents)
    for name, got, want in zip(("dx", "dw", "db"), grads, gradients(x, w, b, targets, t, cotangents), strict=True):
        finite = np.isfinite(np.asarray(got))
        assert finite.all(), f"{name}: {finite.size - finite.sum()} of {finite.size} not finite"
        # z ~ 100 is float32 to 2^-24 * 100 ~ 6e-6 (the bias's rounding in the sum, times 10), and lse likewise:
        # p and each term of the gradients to ~1e-5 relative; the sums over 256 columns or 37 rows of terms of
        # either sign, to that relative error of their largest term
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=name)


def test_entropy_of_confident_rows_is_nonnegative_and_float32_exact(kernel, emulation):
    """Near-one-hot rows with logits ~ +-40: the entropy is accumulated shifted by the running maximum (before:
    E_p[z] unshifted, so lse - E_p[z] cancelled two numbers of ~40 and came out off by ~ulp(40) = 4e-6,
    negative where the entropy is below that). The logits are the weight's columns exactly (x one-hot), so
    the float64 entropy is of the very logits the kernel sees; the gradient through the entropy, against
    float64's within the backward's own float32 bound (p and log p carry lse's rounding, u |lse|)."""
    lm_head = kernel.lm_head
    rows, vocab = 128, 8
    z = confident_logits(rows, vocab, seed=5)
    x, w = np.eye(rows, dtype=np.float32), np.ascontiguousarray(z.T)  # x @ w.T = z exactly
    targets = z.argmax(1).astype(np.int32)
    g = np.random.default_rng(3).standard_normal(rows).astype(np.float32)
    zeros = np.zeros(rows, np.float32)

    def run(x, w):  # noqa: ANN001, ANN202
        stats = lm_head.row_stats(x, w, None, targets)
        return stats, lm_head.row_stats_vjp(x, w, None, targets, stats.lse, stats.entropy, zeros, zeros, g, zeros)

    with emulation.interpret_on_cpu("v6e"):
        stats, (_, dw, _) = jax.jit(run)(x, w)
    got = np.asarray(stats.entropy, np.float64)
    want, bound = entropy_bound(z)
    assert (got >= 0).all(), got[got < 0]
    np.testing.assert_array_less(np.abs(got - want), bound)
    # d entropy / dz_j = -p_j (log p_j + H); dw = G.T (x is the identity)
    z64 = z.astype(np.float64)
    lse = np.log(np.exp(z64 - z64.max(1, keepdims=True)).sum(1)) + z64.max(1)
    log_p = z64 - lse[:, None]
    want_g = -g[:, None] * np.exp(log_p) * (log_p + want[:, None])
    # log p = z - lse to u (|lse| + |log p| + vocab + 2) (lse rounded, log s summed), e^ to 2u more, H to `bound`
    log_p_error = U * (np.abs(lse)[:, None] + np.abs(log_p) + vocab + 4)
    grad_bound = np.abs(g)[:, None] * np.exp(log_p) * (log_p_error * (2 + np.abs(log_p) + want[:, None])
                                                        + bound[:, None])
    np.testing.assert_array_less(np.abs(np.asarray(dw, np.float64).T - want_g), grad_bound)


def test_targets_outside_the_vocabulary_are_refused_on_the_host_and_nan_when_traced(kernel, emulation):
    """A target in no column gave its row a target logit of 0 (log-probability -lse) with no error. Host
    values (numpy, CPU arrays) are refused naming them; traced ones make every statistic of the row NaN and
    the row passes no gradient, so masking it after leaves the others' gradients as they were."""
    lm_head = kernel.lm_head
    x, w, b, targets = operands(16, 64, 200, seed=4)
    wrong = targets.copy()
    wrong[[3, 9]] = [-1, 200]
    with emulation.interpret_on_cpu("v6e"):
        for call in (lm_head.row_stats, lm_head.statistics):
            with pytest.raises(ValueError, match=r"^tokamax lm_head: targets must be in \[0, 200\); got 2 outside, "
                                                 r"e\.g\. \[-1, 200\]$"):
                call(x, w, b, wrong)
        stats = jax.jit(lm_head.row_stats)(x, w, b, wrong)
        ok = np.ones(16, bool)
        ok[[3, 9]] = False

        def masked_log_probs(x, w, b, t):  # noqa: ANN001, ANN202
            s = lm_head.statistics(x, w, b, t, scheme="kernels")
            return jnp.where(ok, s.target_logit - s.lse + s.entropy, 0.0).sum()

        grads = jax.jit(jax.grad(masked_log_probs, argnums=(0, 1, 2)))(x, w, b, wrong)
        want = jax.jit(jax.grad(masked_log_probs, argnums=(0, 1, 2)))(x, w, b, np.where(ok, wrong, 0))
    for name in lm_head.OUTPUTS:
        got = np.asarray(getattr(stats, name))
        assert np.isnan(got[~ok]).all() and np.isfinite(got[ok]).all(), name
    for name, got, expected in zip(("dx", "dw", "db"), grads, want, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=name)
