"""`tokamax.distill`'s stored scheme (`distill.stored`: plain XLA in chunks of rows, the gradient's basis Q kept
from the forward) against float64 JAX from the definitions (`reference`), as `test_kernels` holds the kernels:
the divergence, the entropy and the student's gradients at beta 0, 0.5 and 1, with biases, scales, soft caps and
a temperature, hidden sizes that differ, rows (37) off the chunk (16 here: three chunks, the last padded) and
off 8; float32 within 4x float32's own error (`reference.tolerances`), bf16 within the roundings the scheme
makes. Then the entropy's cotangent (the kernels' backward), the `scheme` argument, the rule `auto` follows,
a frozen head's dropped matmul and what is lowered for the chip at the benchmark's size."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .reference import reference, tolerances
from .test_kernels import SETTINGS, _lower, _real_specs, assert_within, operands

ROWS, HIDDEN_S, HIDDEN_T, VOCAB = 37, 64, 96, 1000
BF16 = 2.0 ** -8  # bf16's unit roundoff (8 significant bits, rounded to the nearest)


@pytest.fixture
def small_chunks(kernel, monkeypatch):
    """The stored scheme in chunks of 16 rows, at any row count."""
    monkeypatch.setattr(kernel.distill.stored, "CHUNKS", (16,))
    return kernel.distill


def run(distill, emulation, ops: tuple, options: dict, g_div: np.ndarray, g_ent: np.ndarray | None,
        scheme: str = "stored"):  # noqa: ANN201
    """(divergence, entropy, (dx, dw, db)) by `scheme`, the gradients of sum(g_div D + g_ent H); `g_ent` None:
    the entropy unused (no cotangent, as TRL)."""
    xs, ws, bs, xt, wt, bt = ops
    bias = np.zeros(ws.shape[0], np.float32) if bs is None else bs

    def loss(xs, ws, b):  # noqa: ANN001, ANN202
        div, ent = distill.divergence(xs, ws, None if bs is None else b, xt, wt, bt, scheme=scheme, **options)
        total = (g_div * div).sum() + (0.0 if g_ent is None else (g_ent * ent).sum())
        return total, (div, ent)

    with emulation.interpret_on_cpu("v6e"):
        grads, (div, ent) = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(xs, ws, bias)
    return np.asarray(div), np.asarray(ent), tuple(np.asarray(g) for g in grads)


def _check(ops: tuple, options: dict, got: tuple, g_div: np.ndarray, g_ent: np.ndarray) -> None:
    div, ent, grads = got
    want_div, want_ent, want_grads = reference(ops, options, g_div, g_ent)
    bounds = tolerances(ops, options, g_div, g_ent)
    assert div.shape == ent.shape == (ops[0].shape[0],) and div.dtype == ent.dtype == np.float32
    for name, g, want, bound in zip(("divergence", "entropy", "dx", "dw", "db"), (div, ent, *grads),
                                    (want_div, want_ent, *want_grads), bounds, strict=True):
        assert g.shape == want.shape, name
        if name == "db" and ops[2] is None:
            assert not g.any()  # no bias: nothing flows to the zeros standing for it
            continue
        assert_within(name, g, want, bound)


@pytest.mark.parametrize("scheme", ["stored", "recompute"])
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("beta", [0.0, pytest.param(0.5, marks=pytest.mark.kernels_ci), 1.0])
def test_stored_matches_float64(small_chunks, emulation, monkeypatch, beta, setting, scheme):
    """Both plain-XLA schemes; the recompute scheme's forward in chunks of 16 rows too, its backward 256 columns a
    step (the vocabulary's 1000: three steps and one of 232)."""
    monkeypatch.setattr(small_chunks.recompute, "CHUNKS", (16,))
    monkeypatch.setattr(small_chunks.recompute, "VCHUNKS", (256,))
    ops = operands(ROWS, HIDDEN_S, HIDDEN_T, VOCAB, seed=int(beta * 10) + len(setting), bias=setting != "plain")
    options = dict(beta=beta, **SETTINGS[setting])
    g_div = np.random.default_rng(7).standard_normal(ROWS).astype(np.float32)
    got = run(small_chunks, emulation, ops, options, g_div, None, scheme=scheme)
    _check(ops, options, got, g_div, np.zeros(ROWS, np.float32))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_an_entropy_cotangent_takes_the_kernels_backward(small_chunks, emulation, beta):
    """The entropy's gradient is not in Q: with a cotangent for it (a JAX user's; TRL passes none), both terms come
    from the kernels' backward, after the stored forward."""
    ops = operands(ROWS, HIDDEN_S, HIDDEN_T, VOCAB, seed=4 + int(beta * 4))
    options = dict(beta=beta, **SETTINGS["scaled-capped-hot"])
    r = np.random.default_rng(8)
    g_div, g_ent = r.standard_normal(ROWS).astype(np.float32), r.standard_normal(ROWS).astype(np.float32)
    _check(ops, options, run(small_chunks, emulation, ops, options, g_div, g_ent), g_div, g_ent)
    zero = np.zeros(ROWS, np.float32)  # the entropy's alone
    _check(ops, options, run(small_chunks, emulation, ops, options, zero, g_ent), zero, g_ent)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("scheme", ["stored", "recompute"])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_bf16_student_within_the_schemes_roundings(small_chunks, emulation, monkeypatch, beta, scheme):
    """A bf16 student and a float32 teacher of another width (the reference takes the same bf16 values): float32
    logits and sums, so the divergence and entropy are as exact as for float32. Q is rounded to bf16 once (as
    TRL rounds its gradient tiles); dx = g (Q @ w_s) comes back in bf16 (two roundings); dw = Q.T @ (g x_s) rounds
    g x_s too and comes back in bf16 (three): each within that many bf16 roundings of the largest of its gradient;
    db = sum_r g_r Q_r in float32 rounds Q alone, but its rows' errors add where their terms cancel (each column's
    error is within u sum_r |g_r Q_r|, not u |db|): two roundings, as `test_kernels` holds its db. The recompute
    scheme makes the same roundings (its Q again in two steps of 256 columns and one of 128)."""
    monkeypatch.setattr(small_chunks.recompute, "CHUNKS", (16,))
    monkeypatch.setattr(small_chunks.recompute, "VCHUNKS", (256,))
    xs, ws, bs, xt, wt, bt = operands(ROWS, 128, 192, 640, seed=9)
    ops = (jnp.asarray(xs, jnp.bfloat16), jnp.asarray(ws, jnp.bfloat16), bs, xt, wt, bt)
    options = dict(beta=beta, student_soft_cap=30.0, temperature=1.2)
    g_div = np.random.default_rng(6).standard_normal(ROWS).astype(np.float32)
    zero = np.zeros(ROWS, np.float32)
    div, ent, (dx, dw, db) = run(small_chunks, emulation, ops, options, g_div, None, scheme=scheme)
    want_div, want_ent, want_grads = reference(ops, options, g_div, zero)
    div_tol, ent_tol, *_ = tolerances(ops, options, g_div, zero)
    assert_within("divergence", div, want_div, div_tol)
    assert_within("entropy", ent, want_ent, ent_tol)
    assert dx.dtype == dw.dtype == jnp.bfloat16 and db.dtype == np.float32
    for name, got, want, roundings in zip(("dx", "dw", "db"), (dx, dw, db), want_grads, (2, 3, 2), strict=True):
        assert_within(name, got, want, roundings * BF16 * np.abs(want).max())


@pytest.mark.kernels_ci
def test_both_schemes_agree_at_a_chunk_multiple(small_chunks, emulation):
    """64 rows, four whole chunks, no padding: the stored scheme and the kernels give the same divergence, entropy
    and gradients within float32's error."""
    ops = operands(64, HIDDEN_S, HIDDEN_T, VOCAB, seed=21)
    options = dict(beta=0.5, **SETTINGS["scaled-cold"])
    g_div = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    bounds = tolerances(ops, options, g_div, np.zeros(64, np.float32))
    stored = run(small_chunks, emulation, ops, options, g_div, None, scheme="stored")
    kernels = run(small_chunks, emulation, ops, options, g_div, None, scheme="kernels")
    for name, a, b, bound in zip(("divergence", "entropy", "dx", "dw", "db"), (stored[0], stored[1], *stored[2]),
                                 (kernels[0], kernels[1], *kernels[2]), bounds, strict=True):
        assert_within(name, a, np.asarray(b, np.float64), 2 * bound)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("scheme", ["fast", "Stored", None, 512])
def test_a_bad_scheme_is_refused_naming_the_argument(kernel, scheme):
    xs, ws, xt, wt = jnp.zeros((8, 64)), jnp.zeros((256, 64)), jnp.zeros((8, 96)), jnp.zeros((256, 96))
    with pytest.raises(ValueError, match=r"^tokamax distill: scheme must be one of 'auto', 'kernels', 'stored', "
                                         rf"'recompute', got {re.escape(repr(scheme))}$"):
        kernel.distill.divergence(xs, ws, None, xt, wt, None, beta=0.5, scheme=scheme)


def _chip(kernel, hbm: int):  # noqa: ANN001, ANN202
    return kernel.roofline.Chip("fake", 165.7e12, 590e9, 128, 128 << 20, hbm, 5, "fake")


@pytest.mark.kernels_ci
def test_the_rule_stores_where_q_fits_an_eighth_of_hbm(kernel, emulation):
    """`stored.choose`: the largest chunk whose temporaries (Q, the row vectors, one chunk's float32 logits of both
    models) fit an eighth of the HBM, where its roofline beats the kernels'; a small HBM takes the kernels, a large
    one the largest chunk; fewer rows than a chunk one chunk of their own (`stored.PREFILL`); at the benchmark's
    size on the v5e (16 GiB) chunks of 512 at 4,096 rows (chunks of 1024 do not fit), the kernels at 16,384 rows
    (Q alone 4.6 GiB)."""
    distill = kernel.distill
    stored, sizes = distill.stored, distill.blocks.Sizes

    def choose(rows, hs, ht, vocab, itemsize, hbm):  # noqa: ANN001, ANN202
        return stored.choose(sizes(rows, hs, ht, vocab, itemsize, itemsize), _chip(kernel, hbm))

    bench = sizes(4096, 2048, 4096, 151936)
    assert choose(4096, 2048, 4096, 151936, 2, 4 << 30) is None
    assert choose(4096, 2048, 4096, 151936, 2, 96 << 30) == 1024
    assert choose(100, 2048, 4096, 151936, 2, 96 << 30) == 104  # a prefill's rows: one chunk, rounded up to 8
    assert choose(300, 2048, 4096, 32000, 2, 96 << 30) == 304  # one chunk, the rows rounded up to 8
    for hbm in (4 << 30, 16 << 30, 96 << 30):
        fits = [c for c in stored.CHUNKS if distill.cost.stored(bench, c).temp_bytes <= hbm // stored.HBM_SHARE]
        assert stored.choose(bench, _chip(kernel, hbm)) == (max(fits) if fits else None)
    with emulation.emulated_chip("v5e"):
        v5e = kernel.roofline.chip()
    assert v5e.hbm // stored.HBM_SHARE < distill.cost.stored(bench, 1024).temp_bytes
    assert stored.choose(bench, v5e) == 512 and distill.cost.stored(bench, 512).temp_bytes < 1.8 * 2 ** 30
    assert stored.choose(sizes(16384, 2048, 4096, 151936), v5e) is None
    assert stored.choose(sizes(128, 2048, 4096, 151936), v5e) == 128  # a prefill's (`stored.PREFILL`)
    # the roofline: narrow hidden sizes make the float32 logits' traffic the stored scheme's cost, and the kernels
    # win; hidden sizes the kernels cannot take at all (no blocks fit the VMEM) leave the stored scheme
    narrow, wide = sizes(4096, 128, 128, 151936), sizes(4096, 65536, 131072, 151936)
    big = _chip(kernel, 96 << 30)
    on_blocks = {k: distill.blocks.choose(narrow, big.vmem, k) for k in distill.blocks.KERNELS}
    narrow_kernels = sum(c.seconds(big) for c in distill.cost.costs(narrow, on_blocks, beta=0.5).values())
    assert distill.cost.stored(narrow, 1024).seconds(big) > narrow_kernels and stored.choose(narrow, big) is None
    with pytest.raises(ValueError, match="tokamax distill: hidden sizes of"):
        distill.blocks.choose(wide, big.vmem)
    assert stored.choose(wide, big) == 1024


def _pallas_calls(distill, emulation, rows: int, hs: int, ht: int, vocab: int, scheme: str) -> int:  # noqa: ANN001
    specs = [jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in ((rows, hs), (vocab, hs), (rows, ht), (vocab, ht))]

    def loss(xs, ws, xt, wt):  # noqa: ANN001, ANN202
        return distill.divergence(xs, ws, None, xt, wt, None, beta=0.5, scheme=scheme)[0].sum()

    with emulation.emulated_chip("v5e"):
        return str(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(*specs)).count("pallas_call")


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("rows", "hs", "ht", "vocab", "scheme"), [
    (512, 2048, 4096, 32000, "stored"),  # fits, four matmuls beat the kernels' six: stored
    (100, 2048, 4096, 32000, "stored"),  # a prefill's rows: one chunk of its own (stored.PREFILL)
    (4096, 128, 128, 151936, "kernels"),  # narrow hidden sizes: the float32 logits' traffic loses to the kernels
    (16384, 2048, 4096, 151936, "recompute"),  # Q past an eighth of the v5e's HBM: Q made again, not kept
])
def test_auto_follows_the_rule(kernel, emulation, rows, hs, ht, vocab, scheme):
    """On the emulated v5e, `auto` traces what `scheme_of` says: no kernel where a plain-XLA scheme runs (as
    "stored" or "recompute"), the kernels' forward and two backward where not (as "kernels"); the stored scheme where
    `stored.choose` takes it."""
    distill = kernel.distill
    calls = 3 if scheme == "kernels" else 0
    assert _pallas_calls(distill, emulation, rows, hs, ht, vocab, "auto") == calls
    assert _pallas_calls(distill, emulation, rows, hs, ht, vocab, scheme) == calls
    sd = [jax.ShapeDtypeStruct((rows, h), jnp.bfloat16) for h in (hs, ht)]
    with emulation.emulated_chip("v5e"):
        chunk = distill.stored.choose(distill.blocks.Sizes(rows, hs, ht, vocab), kernel.roofline.chip())
        assert distill.scheme_of("auto", *sd, vocab).scheme == scheme
    assert (chunk is None) == (scheme != "stored")


def _dots(distill, emulation, argnums: tuple[int, ...], scheme: str = "stored") -> list[str]:  # noqa: ANN001
    """The float32 matmuls of `scheme`'s compiled forward and backward (64 rows) for the v5e, in x_s, w_s, b_s's
    `argnums`."""
    ops = operands(64, HIDDEN_S, HIDDEN_T, VOCAB, seed=2)

    def loss(xs, ws, bs):  # noqa: ANN001, ANN202
        return distill.divergence(xs, ws, bs, *ops[3:], beta=0.5, scheme=scheme)[0].sum()

    with emulation.emulated_chip("v5e"):
        hlo = jax.jit(jax.grad(loss, argnums=argnums)).lower(*ops[:3]).compile().as_text()
    return re.findall(r"= (f32\[[\d,]+\][^ ]*) dot\(", hlo)


@pytest.mark.kernels_ci
def test_a_frozen_head_drops_the_weight_gradients_matmul(small_chunks, emulation):
    """Differentiated in x_s alone (a frozen head, LoRA's), the stored backward's dw = Q.T @ (g x_s) is an output
    nobody reads: XLA's compiled program has one matmul fewer (no [vocab, hidden_s] one), the logits' two and
    dx's left."""
    trained, frozen = _dots(small_chunks, emulation, (0, 1, 2)), _dots(small_chunks, emulation, (0,))
    assert len(trained) == 4 and len(frozen) == 3, (trained, frozen)
    assert any(d.startswith(f"f32[{VOCAB},{HIDDEN_S}]") for d in trained)
    assert not any(d.startswith(f"f32[{VOCAB},{HIDDEN_S}]") for d in frozen)


@pytest.mark.kernels_ci
def test_lowers_at_the_benchmark_size_without_kernels_and_with_q_in_bf16(kernel, emulation):
    """At 4,096 rows, student 2048, teacher 4096, Qwen's 151,936 vocabulary, bf16, on the v5e: `auto` lowers the
    stored scheme (no Mosaic kernel), its residual Q [4096, 151936] in bf16 and no matmul of [4096, 151936] float32
    logits (they are per chunk of 512); at 16,384 rows, Q past the share, the recompute scheme (no kernel, no Q)."""
    distill = kernel.distill
    specs = _real_specs()
    for rows, calls in ((4096, 0), (16384, 0)):
        s = [jax.ShapeDtypeStruct((rows, a.shape[1]), a.dtype) if i in (0, 3) else a for i, a in enumerate(specs)]

        def loss(xs, ws, bs, xt, wt, bt):  # noqa: ANN001, ANN202
            return distill.divergence(xs, ws, bs, xt, wt, bt, beta=0.5, student_soft_cap=30.0)[0].sum()

        module = _lower(emulation, "v5e", jax.grad(loss, argnums=(0, 1, 2)), *s)
        assert module.count("tpu_custom_call") == calls
        if rows == 16384:
            assert not re.search(r"tensor<(\d+x)?16384x151936x", module)  # no Q
        else:
            assert "tensor<4096x151936xbf16>" in module  # Q
            assert not re.search(r"dot_general[^\n]*-> tensor<4096x151936xf32>", module)  # logits: per chunk
            assert re.search(r"dot_general[^\n]*-> tensor<512x151936xf32>", module)
            assert "tensor<8x512x151936xbf16>" in module  # the scan's stacked Q chunks
