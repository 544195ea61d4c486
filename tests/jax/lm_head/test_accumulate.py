"""`tokamax.lm_head.accumulate`: the chunked scheme's dW added by a Pallas kernel that streams the accumulator
(float32, or fused's bf16 pair) under the matmul, in interpret mode: against float64, against XLA's own
accumulation inside `fused.loss_and_grads`, which calls take it, and the errors of a wrong call."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from .numerics import U
from .reference import operands


@pytest.fixture(scope="module")
def accumulate(kernel):
    return importlib.import_module(f"{kernel.__name__}.lm_head.accumulate")


def _arrays(chunk: int, vocab: int, hidden: int, seed: int = 0):  # noqa: ANN202
    r = np.random.default_rng(seed)
    g = jnp.asarray(r.standard_normal((chunk, vocab)), jnp.bfloat16)
    x = jnp.asarray(r.standard_normal((chunk, hidden)), jnp.bfloat16)
    acc = jnp.asarray(r.standard_normal((vocab, hidden)) * 4, jnp.float32)
    return acc, g, x


@pytest.mark.kernels_ci
@pytest.mark.parametrize("pair", [False, True, "scaled"], ids=["float32", "pair", "pair-int8"])
@pytest.mark.parametrize(("vocab", "transposed"), [(1280, False), (1056, True)], ids=["1280", "1056-transposed"])
def test_the_kernel_adds_g_t_x_to_the_accumulator(accumulate, emulation, pair, vocab, transposed):
    """1,280 rows: five blocks of 256; 1,056 (off the lanes) with g given as g.T, as the chunked scheme makes it
    there: three blocks of 352 (a multiple of 32 dividing it)."""
    chunk, hidden = 256, 384
    acc, g, x = _arrays(chunk, vocab, hidden)
    into = (lambda a, g, x: accumulate.into(a, g.T, x, transposed=True)) if transposed else accumulate.into
    with emulation.interpret_on_cpu("v5e"):
        assert accumulate.block_rows(chunk, hidden, vocab, 2, 128 << 20, transposed) == (256 if vocab == 1280 else 352)
        if pair == "scaled":
            high = acc.astype(jnp.bfloat16)
            low = accumulate.scaled_low(high.astype(jnp.float32), acc, 7)
            acc = accumulate.scaled_value(high.astype(jnp.float32), low, 7)  # what the pair holds
            h, lo = jax.jit(into)((high, low), g, x)
            assert (h.dtype, lo.dtype) == (jnp.bfloat16, jnp.int8)
            got = np.asarray(accumulate.scaled_value(h.astype(jnp.float32), lo, 7), np.float64)
        elif pair:
            high = acc.astype(jnp.bfloat16)
            low = (acc - high.astype(jnp.float32)).astype(jnp.bfloat16)
            acc = high.astype(jnp.float32) + low.astype(jnp.float32)  # what the pair holds
            h, lo = jax.jit(into)((high, low), g, x)
            assert h.dtype == lo.dtype == jnp.bfloat16
            got = np.asarray(h, np.float64) + np.asarray(lo, np.float64)
        else:
            got = np.asarray(jax.jit(into)(acc, g, x), np.float64)
    g64, x64 = np.asarray(g, np.float64), np.asarray(x, np.float64)
    want = np.asarray(acc, np.float64) + g64.T @ x64
    # float32: the product's sum over the chunk, ~sqrt(chunk) u of its magnitude, and the addition's rounding;
    # the pair keeps about 16 bits of the sum (high's 8 and low's 8): 2^-16 of it; the int8 low half to 1/512 of
    # high's last place, 1/256 where the remainder is within 1/512 of half that place (held as 127): 2^-15 of the sum
    bound = (np.sqrt(chunk) + 8) * U * (np.abs(g64).T @ np.abs(x64) + np.abs(want))
    if pair:
        bound += 2.0 ** (-15 if pair == "scaled" else -16) * np.abs(want)
    assert (np.abs(got - want) <= bound).all(), float((np.abs(got - want) / bound).max())


@pytest.mark.kernels_ci
@pytest.mark.parametrize("pair", [False, True, "scaled"], ids=["float32", "pair", "pair-int8"])
def test_the_chunked_scheme_gives_what_xla_accumulates(kernel, emulation, accumulate, monkeypatch, pair):
    """300 rows in 2 chunks of 128 and the 44 left as a chunk of their own (the kernel traced for each) at a
    vocabulary of 1,280, of 1,056 (off the lanes: the [chunk, vocab] arrays made as their transposes, g handed to
    the kernel so) and of 1,000 (no multiple of 32 divides it: XLA adds the float32 accumulator, and says nothing, as
    the kernel is an implementation choice; the pair, which only the kernel adds, is refused): against the same call
    with the kernel's calls made by XLA (`accumulate.add(kernel=False)`, the same sums as the kernel adds them): the
    loss, dx and db the same bits; dW the same sums in another order, within one bf16 rounding and the float32 sums'
    order (and the pair's low half: 2^-16 of the sum, 2^-15 in int8, `accumulate`'s bound)."""
    lm_head = kernel.lm_head
    real = accumulate.into  # the kernel itself, wrapped below to count its calls

    def by_xla(acc, g, x, transposed=False):  # noqa: ANN001, ANN202 - the kernel's call, added by XLA
        return accumulate.add(acc, g, x, False, transposed)

    for vocab in (1280, 1056, 1000):
        rows, hidden = 300, 128
        x, w, b, targets = operands(rows, hidden, vocab, seed=11)
        x, w = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
        m = np.ones(rows, np.float32)
        out, calls = {}, {}
        for use in (False, True):
            seen: list[int] = []
            monkeypatch.setattr(accumulate, "into", lambda *a, seen=seen, real=real if use else by_xla:
                                seen.append(1) or real(*a))

            def step(x, w, targets=targets, m=m):  # noqa: ANN001, ANN202 - traced afresh for each `into`
                return lm_head.fused.loss_and_grads(x, w, None, targets, m, lm_head.IDENTITY, chunk=128,
                                                    pair_accumulator=bool(pair), accumulator_kernel=True,
                                                    scaled_low=pair == "scaled")
            with emulation.interpret_on_cpu("v5e"):
                if pair and vocab == 1000:
                    with pytest.raises(ValueError, match=r"^tokamax lm_head loss_and_grads: pair_accumulator=True"):
                        step(x, w)
                    break
                out[use] = jax.jit(step)(x, w)
            calls[use] = len(seen)  # traced twice: the scan's body and the rows left
        if pair and vocab == 1000:
            continue
        assert calls == {False: 2 * (vocab != 1000), True: 2 * (vocab != 1000)}, (vocab, calls)
        (loss, dx, dw, db), (loss_k, dx_k, dw_k, db_k) = out[False], out[True]
        assert float(loss) == float(loss_k) and dw.dtype == dw_k.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(dx_k, np.float32))
        np.testing.assert_array_equal(np.asarray(db), np.asarray(db_k))
        a, k = np.asarray(dw, np.float64), np.asarray(dw_k, np.float64)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(a), 1e-30))) - 7)  # bf16: 8 significant bits
        scale = np.abs(np.asarray(dw, np.float64)).max()
        low = {False: 0.0, True: 2.0 ** -16, "scaled": 2.0 ** -15}[pair]
        assert (np.abs(a - k) <= ulp + (np.sqrt(rows) + 8) * U * scale + low * scale).all(), vocab
        assert (a != k).mean() < 0.05, vocab  # mostly the same rounding


@pytest.mark.kernels_ci
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_the_int8_low_half_keeps_the_remainder_to_a_512th_of_highs_last_place(accumulate, dtype):
    """`scaled_low` / `scaled_value` against float64 over sums from 2^-100 to 2^100 (bf16) or the float16 range,
    either sign, zero, sums just below and at powers of two (where high rounds up into the next binade) and exactly
    half a place from high: the value held is the sum within 1/512 of high's last place, within 1/256 where the
    remainder is over 127.5 of its 1/256ths (held as 127), so the pair carries 7 to 8 more bits than high alone."""
    r = np.random.default_rng(5)
    bits = jnp.finfo(dtype).nmant
    top = 100 if dtype == jnp.bfloat16 else 14
    mags = np.exp2(r.uniform(-top, top, 4000)) * r.choice([-1.0, 1.0], 4000)
    edges = np.exp2(np.arange(-12.0, 14.0))
    halves = edges * (1 + 2.0 ** -(bits + 1))  # exactly half a place above a power of two
    sums = np.concatenate([mags, [0.0, -0.0], edges, edges * (1 - 2.0 ** -20), -edges * (1 + 2.0 ** -12), halves,
                           -halves])
    total = jnp.asarray(sums, jnp.float32)
    high = total.astype(dtype).astype(jnp.float32)
    low = accumulate.scaled_low(high, total, bits)
    assert low.dtype == jnp.int8
    held = np.asarray(accumulate.scaled_value(high, low, bits), np.float64)
    h = np.abs(np.asarray(high, np.float64))
    place = np.exp2(np.floor(np.log2(np.maximum(h, 2.0 ** -126))) - bits)
    want = np.asarray(total, np.float64)
    err = np.abs(held - want)
    tie = np.abs(np.asarray(high, np.float64) - want) > place / 2 - place / 512  # over 127.5 units: held as 127
    assert tie[-2 * len(halves):].all() and tie[:len(mags)].mean() < 0.01
    assert (err[~tie] <= place[~tie] / 512 + 2.0 ** -127).all(), float(np.max(err[~tie] / place[~tie]))
    assert (err[tie] <= place[tie] / 256).all(), float(np.max(err[tie] / place[tie]))
    assert (np.abs(np.asarray(high, np.float64) - want) > place / 512).mean() > 0.5  # high alone does not


@pytest.mark.kernels_ci
def test_a_wrong_call_is_refused_with_what_is_wrong(accumulate, emulation):
    acc, g, x = _arrays(64, 1280, 128)
    with emulation.interpret_on_cpu("v5e"):
        with pytest.raises(ValueError, match=r"tokamax lm_head accumulate: g must be \[chunk, vocab\]"):
            accumulate.into(acc, g[:, :1000], x)
        with pytest.raises(ValueError, match=r"tokamax lm_head accumulate: .* one dtype"):
            accumulate.into(acc, g, x.astype(jnp.float32))
        with pytest.raises(ValueError, match=r"tokamax lm_head accumulate: g must be \[vocab, chunk\]"):
            accumulate.into(acc, g, x, transposed=True)
        with pytest.raises(ValueError, match=r"no block of .* rows divides the vocabulary \(1000\)"):
            accumulate.into(acc[:1000], g[:, :1000], x)
        with pytest.raises(ValueError, match=r"no multiple of 32 up to 1024 rows divides the vocabulary \(1000\)"):
            accumulate.into(acc[:1000], g[:, :1000].T, x, transposed=True)
    assert not accumulate.fits(64, 128, 1000, 2, 128 << 20)
    assert accumulate.block_rows(64, 128, 262208, 2, 128 << 20, transposed=True) == 544  # Gemma 3: 2^6 x 17 x 241
    # x's chunk itself over the VMEM: no block
    assert accumulate.block_rows(65536, 8192, 1280, 2, 128 << 20) is None
