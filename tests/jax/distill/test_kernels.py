"""`tokamax.distill` (TRL's distillation divergence on our kernels) in Pallas TPU interpret mode against
float64 JAX from the definitions (`reference`): the divergence and the student's entropy per token at
beta 0, 0.5 and 1, with a bias, a logit scale, a soft cap per model and a temperature, hidden sizes that
differ, a vocabulary (1000) and rows (37) off every block; the student's gradients (dx, dw, db) against
float64 autodiff, each within 4x the error float32 itself makes there (the same definitions evaluated
plainly in float32: `reference.tolerances`, derived at each size and value, not tuned); interpret mode
reads NaN past the arrays' ends, so the masking of the overhanging blocks is checked too."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .reference import U, reference, tolerances

SETTINGS = {
    "plain": dict(),
    "scaled-capped-hot": dict(temperature=0.7, student_scale=1.5, student_soft_cap=3.0, teacher_scale=0.8,
                              teacher_soft_cap=5.0),
    "scaled-cold": dict(temperature=2.0, student_scale=0.5, teacher_scale=2.0),
}


def operands(rows: int, hidden_s: int, hidden_t: int, vocab: int, seed: int, bias: bool = True) -> tuple:
    """float32 operands with logits of spread ~2 to 3 (the teacher's sharper), biases float32."""
    r = np.random.default_rng(seed)
    xs = (2 * r.standard_normal((rows, hidden_s)) / np.sqrt(hidden_s)).astype(np.float32)
    ws = r.standard_normal((vocab, hidden_s)).astype(np.float32)
    xt = (3 * r.standard_normal((rows, hidden_t)) / np.sqrt(hidden_t)).astype(np.float32)
    wt = r.standard_normal((vocab, hidden_t)).astype(np.float32)
    bs = (r.standard_normal(vocab) / 4).astype(np.float32) if bias else None
    bt = (r.standard_normal(vocab) / 4).astype(np.float32) if bias else None
    return xs, ws, bs, xt, wt, bt


def run(distill, emulation, ops: tuple, options: dict, g_div: np.ndarray, g_ent: np.ndarray, chip: str = "v6e"):  # noqa: ANN201
    """(divergence, entropy, (dx, dw, db)) of the kernels (the scheme forced: `auto` takes the stored scheme at 300
    rows), the gradients of sum(g_div D + g_ent H)."""
    xs, ws, bs, xt, wt, bt = ops
    bias = np.zeros(ws.shape[0], np.float32) if bs is None else bs

    def loss(xs, ws, b):  # noqa: ANN001, ANN202
        div, ent = distill.divergence(xs, ws, None if bs is None else b, xt, wt, bt, scheme="kernels", **options)
        return (g_div * div + g_ent * ent).sum(), (div, ent)

    with emulation.interpret_on_cpu(chip):
        grads, (div, ent) = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(xs, ws, bias)
    return np.asarray(div), np.asarray(ent), tuple(np.asarray(g) for g in grads)


def assert_within(name: str, got: np.ndarray, want: np.ndarray, tolerance: float) -> None:
    error = np.abs(np.asarray(got, np.float64) - want)
    worst = np.unravel_index(np.argmax(error), error.shape)
    assert error[worst] <= tolerance, f"{name}: error {error[worst]:.3g} over its tolerance {tolerance:.3g} at {worst}"


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("beta", [0.0, pytest.param(0.5, marks=pytest.mark.kernels_ci), 1.0])
def test_divergence_entropy_and_gradients_match_float64(kernel, emulation, beta, setting):
    rows, hidden_s, hidden_t, vocab = 37, 64, 96, 1000
    ops = operands(rows, hidden_s, hidden_t, vocab, seed=int(beta * 10) + len(setting), bias=setting != "plain")
    options = dict(beta=beta, **SETTINGS[setting])
    r = np.random.default_rng(7)
    g_div, g_ent = r.standard_normal(rows).astype(np.float32), r.standard_normal(rows).astype(np.float32)
    div, ent, grads = run(kernel.distill, emulation, ops, options, g_div, g_ent)
    want_div, want_ent, want_grads = reference(ops, options, g_div, g_ent)
    div_bound, ent_bound, *grad_bounds = tolerances(ops, options, g_div, g_ent)
    assert div.shape == ent.shape == (rows,) and div.dtype == ent.dtype == np.float32
    assert_within("divergence", div, want_div, div_bound)
    assert_within("entropy", ent, want_ent, ent_bound)
    for name, got, want, bound in zip(("dx", "dw", "db"), grads, want_grads, grad_bounds, strict=True):
        assert got.shape == want.shape
        if name == "db" and ops[2] is None:
            assert not got.any()  # no bias: nothing flows to the zeros standing for it
            continue
        assert_within(name, got, want, bound)


@pytest.mark.kernels_ci
def test_the_tolerances_are_float32_sized():
    """A kernel off by 1e-5 of a divergence, or of the largest gradient, would fail the tolerances above."""
    ops = operands(37, 64, 96, 1000, seed=3)
    options = dict(beta=0.5, **SETTINGS["scaled-capped-hot"])
    ones = np.ones(37, np.float32)
    div, ent, grads = reference(ops, options, ones, ones)
    for want, tolerance in zip((div, ent, *grads), tolerances(ops, options, ones, ones), strict=True):
        assert U * np.abs(want).max() <= tolerance / 4 < 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_several_blocks_and_sharp_logits(kernel, emulation, beta):
    """300 rows (blocks of 256: the second overhangs by 212) and a vocabulary of 5000 (blocks of 2048: the
    third holds 904 columns), logits of +-30 whose maxima move between vocabulary blocks: the online
    sums rebased at every move (the KLs' gaps by both models' moves)."""
    rows, vocab = 300, 5000
    ops = operands(rows, 128, 64, vocab, seed=11 + int(beta * 2))
    options = dict(beta=beta, student_scale=6.0, teacher_scale=9.0, temperature=0.9)
    blocks = kernel.distill.blocks.choose(kernel.distill.blocks.Sizes(rows, 128, 64, vocab, 4, 4), 128 << 20)
    assert blocks.grid(kernel.distill.blocks.Sizes(rows, 128, 64, vocab)) == (2, 3)
    r = np.random.default_rng(5)
    g_div, g_ent = r.standard_normal(rows).astype(np.float32), r.standard_normal(rows).astype(np.float32)
    div, ent, grads = run(kernel.distill, emulation, ops, options, g_div, g_ent)
    want_div, want_ent, want_grads = reference(ops, options, g_div, g_ent)
    for name, got, want, tolerance in zip(("divergence", "entropy", "dx", "dw", "db"), (div, ent, *grads),
                                          (want_div, want_ent, *want_grads),
                                          tolerances(ops, options, g_div, g_ent), strict=True):
        assert_within(name, got, want, tolerance)


def test_bf16_operands_and_a_float32_teacher(kernel, emulation):
    """A bf16 student and a float32 teacher of another width (the reference takes the same bf16 values):
    float32 logits and sums, so the divergence and entropy are as exact as for float32; the gradient block
    enters the MXU in the student's bf16 (as TRL rounds its tiles to the compute dtype) and dx, dw come back
    in bf16: each within 2 x 2^-8 (two roundings) of the largest of its gradient, not of each element."""
    xs, ws, bs, xt, wt, bt = operands(64, 128, 192, 640, seed=9)
    ops = (jnp.asarray(xs, jnp.bfloat16), jnp.asarray(ws, jnp.bfloat16), bs, xt, wt, bt)
    options = dict(beta=0.5, student_soft_cap=30.0, temperature=1.2)
    r = np.random.default_rng(6)
    g_div, g_ent = r.standard_normal(64).astype(np.float32), np.zeros(64, np.float32)
    div, ent, (dx, dw, db) = run(kernel.distill, emulation, ops, options, g_div, g_ent)
    want_div, want_ent, want_grads = reference(ops, options, g_div, g_ent)
    div_tol, ent_tol, *_ = tolerances(ops, options, g_div, g_ent)
    assert_within("divergence", div, want_div, div_tol)
    assert_within("entropy", ent, want_ent, ent_tol)
    assert dx.dtype == dw.dtype == jnp.bfloat16 and db.dtype == np.float32
    for name, got, want in zip(("dx", "dw", "db"), (dx, dw, db), want_grads, strict=True):
        assert_within(name, got, want, 2 * 2.0 ** -8 * np.abs(want).max())


def _lower(emulation, chip: str, fn, *specs) -> str:  # noqa: ANN001
    with emulation.emulated_chip(chip), jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        return jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",)).as_text()


REAL = dict(rows=16384, hidden_s=2048, hidden_t=4096, vocab=151936)


def _real_specs() -> tuple:
    sd = jax.ShapeDtypeStruct
    rows, vocab = REAL["rows"], REAL["vocab"]
    return (sd((rows, REAL["hidden_s"]), jnp.bfloat16), sd((vocab, REAL["hidden_s"]), jnp.bfloat16),
            sd((vocab,), jnp.float32), sd((rows, REAL["hidden_t"]), jnp.bfloat16),
            sd((vocab, REAL["hidden_t"]), jnp.bfloat16), sd((vocab,), jnp.float32))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_lowers_for_each_chip_without_logits_or_copies(kernel, emulation, chip):
    """At the issue's size (student hidden 2048, teacher 4096, Qwen's 151,936 vocabulary, 16,384 tokens,
    bf16), JSD and soft caps: the forward one Mosaic kernel, the backward two, no [rows, vocab] array and no
    padded copy of either weight anywhere; vocabulary blocks of 512 or more."""
    distill = kernel.distill
    s = distill.setting(0.5, temperature=0.7, student_soft_cap=30.0, teacher_soft_cap=50.0)
    specs = _real_specs()
    row = jax.ShapeDtypeStruct((REAL["rows"],), jnp.float32)

    def backward(xs, ws, bs, xt, wt, bt, *vectors):  # noqa: ANN001, ANN002, ANN202
        saved = distill.Forward(vectors[0], vectors[1], vectors[2], vectors[3], vectors[4])
        return distill.backward(xs, ws, bs, xt, wt, bt, s, saved, vectors[5], vectors[6])

    forward = _lower(emulation, chip, lambda *a: distill.forward(*a, s), *specs)
    back = _lower(emulation, chip, backward, *specs, *[row] * 7)
    assert forward.count("tpu_custom_call") == 1 and back.count("tpu_custom_call") == 2
    rows, vocab = REAL["rows"], REAL["vocab"]
    for module in (forward, back):
        assert not re.search(rf"tensor<{rows}x{vocab}x", module) and not re.search(rf"tensor<{vocab}x{rows}x", module)
        for hidden in (REAL["hidden_s"], REAL["hidden_t"]):  # the operands as given, never a padded copy
            assert set(re.findall(rf"tensor<(\d+)x{hidden}xbf16>", module)) <= {str(rows), str(vocab)}
        assert "tokamax_distill_jsd" in module
    with emulation.emulated_chip(chip):
        from jax.experimental.pallas import tpu as pltpu

        sizes = distill.blocks.Sizes(rows, REAL["hidden_s"], REAL["hidden_t"], vocab)
        chosen = {k: distill.blocks.choose(sizes, pltpu.get_tpu_info().vmem_capacity_bytes, k)
                  for k in distill.blocks.KERNELS}
    assert all(b.vocab >= 512 for b in chosen.values()), chosen
    assert chosen["forward"].rows >= chosen["backward_w"].rows, chosen  # the weights re-read per row block


@pytest.mark.kernels_ci
def test_blocks_fit_half_the_vmem_and_too_large_hidden_sizes_are_refused(kernel):
    blocks = kernel.distill.blocks
    for capacity in (64 << 20, 128 << 20):
        for hs, ht, vocab in ((2048, 4096, 151936), (4096, 8192, 128256), (1024, 2048, 262144), (64, 96, 1000)):
            sizes = blocks.Sizes(16384, hs, ht, vocab)
            # vocabulary blocks >= 512 here: within half the VMEM where any such fits (all but hidden sizes of 4096
            # and 8192 on 64 MiB), else within the kernels' limit
            budget = capacity // 2 if hs + ht <= 6144 or capacity > 64 << 20 else blocks.vmem_limit(capacity)
            chosen = blocks.choose(sizes, capacity)
            assert chosen.vmem_bytes(sizes) <= budget and 512 <= chosen.vocab <= -(-vocab // 128) * 128
            for name in blocks.KERNELS:  # each kernel's own
                own = blocks.choose(sizes, capacity, name)
                assert own.kernel_vmem_bytes(name, sizes) <= budget and own.vocab >= 512, (name, own)
    assert blocks.choose(blocks.Sizes(37, 64, 96, 1000), 128 << 20) == blocks.Blocks(128, 1024)
    with pytest.raises(ValueError, match=r"^tokamax distill: hidden sizes of 65536 \(student\) and 131072 \(teacher\) "
                                         r"need \d+ bytes of VMEM at the smallest blocks"):
        blocks.choose(blocks.Sizes(16384, 65536, 131072, 151936), 64 << 20)


def _bad(distill, which: str):  # noqa: ANN001, ANN202
    xs, ws, xt, wt = jnp.zeros((8, 64)), jnp.zeros((256, 64)), jnp.zeros((8, 96)), jnp.zeros((256, 96))
    calls = {
        "beta": lambda: distill.divergence(xs, ws, None, xt, wt, None, beta=1.5),
        "temperature": lambda: distill.divergence(xs, ws, None, xt, wt, None, beta=0.5, temperature=0.0),
        "soft cap": lambda: distill.divergence(xs, ws, None, xt, wt, None, beta=0.5, teacher_soft_cap=-1.0),
        "hidden": lambda: distill.divergence(xs, wt, None, xt, wt, None, beta=0.5),
        "vocab": lambda: distill.divergence(xs, ws, None, xt, wt[:200], None, beta=0.5),
        "rows": lambda: distill.divergence(xs, ws, None, xt[:4], wt, None, beta=0.5),
        "dtype": lambda: distill.divergence(xs, ws.astype(jnp.bfloat16), None, xt, wt, None, beta=0.5),
        "float16": lambda: distill.divergence(xs, ws, None, xt.astype(jnp.float16), wt.astype(jnp.float16), None,
                                              beta=0.5),
        "bias": lambda: distill.divergence(xs, ws, None, xt, wt, jnp.zeros(7), beta=0.5),
    }
    return calls[which]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("which", "message"), [
    ("beta", r"beta must be a number in \[0, 1\], got 1\.5"),
    ("temperature", "temperature must be > 0, got 0.0"),
    ("soft cap", "teacher_soft_cap must be > 0 or None, got -1.0"),
    ("hidden", "the student's hidden size is 64 in its hidden states but 96 in its weight"),
    ("vocab", r"the student's vocabulary \(256\) and the teacher's \(200\) must be the same"),
    ("rows", r"the student's rows \(8\) and the teacher's \(4\) must be the same tokens"),
    ("dtype", "the student's hidden states and weight must share a dtype"),
    ("float16", "the teacher's hidden states and weight must share a dtype, bfloat16 or float32; got float16"),
    ("bias", r"the teacher's bias must be \[vocab\] \(256\), got \(7,\)"),
])
def test_bad_calls_name_the_kernel_and_the_argument(kernel, which, message):
    with pytest.raises((ValueError, TypeError), match=message) as info:
        _bad(kernel.distill, which)()
    assert str(info.value).startswith("tokamax distill: ")
