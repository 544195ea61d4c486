"""`tokamax.splash` in Pallas TPU interpret mode on CPU (jax 0.12; the Torch tier checks the same
calls on jax 0.10.2 through the Torch op) against float64 numpy attention: lengths the blocks do not
divide, a batch with padding and packed documents, a window at an offset, GQA and MQA, soft caps and
sinks; values and gradients (`attend` / `attend_vjp`), and run-time offsets (`attend_at`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.public.attention_reference import attention

TOL = dict(rtol=2e-4, atol=5e-5)  # f32; the online softmax reorders f32 sums


def _operands(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int, seed: int) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    shapes = [(batch, heads, q_len, 128), (batch, kv_heads, kv_len, 128), (batch, kv_heads, kv_len, 128),
              (batch, heads, q_len, 128)]
    return [r.standard_normal(s).astype(np.float32) * (0.3 if i < 2 else 1.0) for i, s in enumerate(shapes)]


def _allowed(q_pos: np.ndarray, kv_len: int, window: tuple | None, q_ids: np.ndarray, kv_ids: np.ndarray,
             causal: bool = True) -> np.ndarray:
    """Keys j a query at position p sees: j <= p if causal, and p - left <= j <= p + right within a window."""
    j = np.arange(kv_len)[None, :]
    p = q_pos[:, None]
    mask = j <= p if causal else np.ones((len(q_pos), kv_len), bool)
    if window is not None:
        mask = mask & (j >= p - window[0]) & (j <= p + window[1])
    return mask & (q_ids[:, None] == kv_ids[None, :])


@pytest.mark.parametrize(("q_len", "kv_len", "offset", "causal", "window", "kv_heads"), [
    (37, 37, 0, True, None, 2), (129, 129, 0, True, (31, 0), 1), (40, 200, 160, False, (63, 2), 2),
    (129, 129, 0, True, (31, 31), 2)],
    ids=["37-causal-gqa", "129-window-mqa", "40x200-two-sided-window-offset", "129-causal-window-clipped"])
def test_attend_values_and_gradients(kernel, emulation, q_len, kv_len, offset, causal, window, kv_heads):
    """`MaskSpec.of(causal, window)`: both hold (a causal window sees no key past its query, whatever its
    right side), a two-sided window only without causal."""
    splash = kernel.splash
    q, k, v, dout = _operands(3, 4, kv_heads, q_len, kv_len, seed=q_len)
    mqa = kv_heads == 1
    if mqa:
        k, v = k[:, 0], v[:, 0]
    ids = np.ones((3, kv_len), np.int32)
    ids[1, : kv_len // 4] = 2  # padding at the front
    ids[2, kv_len - kv_len // 5:] = 3  # another document at the end
    q_ids = ids[:, kv_len - q_len:] if q_len != kv_len else ids
    spec = splash.MaskSpec.of(causal, window)

    def run(q, k, v, dout):  # noqa: ANN001, ANN202
        out, m, lse = splash.attend(q, k, v, q_ids, ids, None, spec=spec, offset=offset)
        return out, splash.attend_vjp(q, k, v, q_ids, ids, None, out, m, lse, dout, spec=spec, offset=offset)[:3]

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        out, grads = jax.jit(run)(q, k, v, dout)
    for b in range(3):
        allowed = _allowed(offset + np.arange(q_len), kv_len, window, q_ids[b], ids[b], causal)
        kb, vb = (k[b][None], v[b][None]) if mqa else (k[b], v[b])
        want = attention(q[b], kb, vb, dout[b], allowed, None)
        got = [out[b], grads[0][b], grads[1][b], grads[2][b]]
        if mqa:
            got[2], got[3] = got[2][None], got[3][None]
        for name, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, err_msg=f"{name}[{b}]", **TOL)


@pytest.mark.parametrize("with_sinks", [False, True], ids=["folded", "sinks"])
def test_attend_at_a_run_time_offset(kernel, emulation, with_sinks):
    """Three queries at a run-time offset into a 300-slot cache filled to 171 (row 1 front-padded), a
    window of 64; one jitted function serves two offsets."""
    splash = kernel.splash
    q, k, v, _ = _operands(2, 4, 2, 3, 300, seed=7)
    sinks = np.linspace(-1.0, 1.0, 4, dtype=np.float32) if with_sinks else None
    spec = splash.MaskSpec.of(True, (63, 0))
    fn = jax.jit(lambda q, k, v, qi, ki, o: splash.attend_at(q, k, v, qi, ki, o, sinks, spec=spec))
    for fill in (171, 90):
        ids = np.zeros((2, 300), np.int32)
        ids[:, :fill] = 1
        ids[1, :10] = 2
        q_ids = ids[:, fill - 3:fill]
        with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
            out = fn(q, k, v, q_ids, ids, jnp.int32(fill - 3))
        for b in range(2):
            allowed = _allowed(fill - 3 + np.arange(3), 300, (63, 0), q_ids[b], ids[b])
            logits = np.einsum("hqd,hkd->hqk", q[b].astype(np.float64), np.repeat(k[b], 2, 0).astype(np.float64))
            logits = np.where(allowed, logits, -np.inf)
            top = logits.max(-1, keepdims=True)
            if with_sinks:
                top = np.maximum(top, sinks[:, None, None])
            weights = np.exp(logits - top)
            denominator = weights.sum(-1, keepdims=True) + (np.exp(sinks[:, None, None] - top) if with_sinks else 0)
            want = np.einsum("hqk,hkd->hqd", weights / denominator, np.repeat(v[b], 2, 0).astype(np.float64))
            np.testing.assert_allclose(np.asarray(out[b]), want, err_msg=f"fill {fill}, row {b}", **TOL)


@pytest.mark.kernels_ci
def test_a_causal_window_stays_causal(kernel):
    """`MaskSpec.of(causal, window)` names a mask where both hold: a causal window's right side is clipped
    to 0, a causal window with no left side is causal, and a window without causal is as given."""
    of, spec = kernel.splash.MaskSpec.of, kernel.splash.MaskSpec
    assert of(True, (31, 31)) == of(True, (31, None)) == of(True, (31, 0)) == spec("local", 31, 0)
    assert of(True, (None, 8)) == of(True, None) == spec("causal")
    assert of(False, (31, 31)) == spec("local", 31, 31) and of(False, None) == spec("full")
    with pytest.raises(ValueError, match="a local window needs a left or a right size"):
        of(True, (None, None))


def _with_sinks(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, allowed: np.ndarray,
                sinks: np.ndarray) -> tuple[np.ndarray, ...]:
    """float64 attention with a sink per head (an extra logit in each row's softmax that holds no value) and
    d(sum(out * dout))/d(q, k, v, sinks); layout [heads, length, dim], GQA as `attention`."""
    heads, kv_heads = q.shape[0], k.shape[0]
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    k, v = np.repeat(k, heads // kv_heads, 0), np.repeat(v, heads // kv_heads, 0)
    logits = np.where(allowed, np.einsum("hqd,hkd->hqk", q, k), -np.inf)
    sink = sinks.astype(np.float64)[:, None, None]
    top = np.maximum(logits.max(-1, keepdims=True), sink)
    weights, sink_weight = np.exp(logits - top), np.exp(sink - top)
    total = weights.sum(-1, keepdims=True) + sink_weight
    p, p_sink = weights / total, (sink_weight / total)[..., 0]
    out = np.einsum("hqk,hkd->hqd", p, v)
    dp = np.einsum("hqd,hkd->hqk", dout, v)
    delta = (dout * out).sum(-1, keepdims=True)  # sum_j p_j dp_j: the sink's own dp is 0
    dlogits = p * (dp - delta)
    dq = np.einsum("hqk,hkd->hqd", dlogits, k)
    dk = np.einsum("hqk,hqd->hkd", dlogits, q).reshape(kv_heads, -1, k.shape[1], q.shape[2]).sum(1)
    dv = np.einsum("hqk,hqd->hkd", p, dout).reshape(kv_heads, -1, k.shape[1], q.shape[2]).sum(1)
    dsinks = -(p_sink * delta[..., 0]).sum(-1)
    return out, dq, dk, dv, dsinks


def test_jax_grad_through_attend(kernel, emulation):
    """A JAX user's `jax.grad` of a loss on `attend`'s output runs upstream's backward (`attend_vjp`), not
    upstream's kernel VJP (which needs backward blocks `attend` does not set): gradients in q, k, v and
    the sinks against float64, with GQA, segment ids (padding at the front) and a window at an offset."""
    splash = kernel.splash
    q_len, kv_len, offset, window = 40, 72, 32, (31, 0)
    q, k, v, dout = _operands(2, 4, 2, q_len, kv_len, seed=5)
    sinks = np.array([-0.5, 0.0, 0.5, 1.0], np.float32)
    ids = np.ones((2, kv_len), np.int32)
    ids[1, :9] = 2
    q_ids = ids[:, kv_len - q_len:]
    spec = splash.MaskSpec.of(True, window)

    def loss(q, k, v, sinks):  # noqa: ANN001, ANN202
        out, _, _ = splash.attend(q, k, v, q_ids, ids, sinks, spec=spec, offset=offset)
        return jnp.sum(out * dout)

    with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True):
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, sinks)
    want_dsinks = 0.0
    for b in range(2):
        allowed = _allowed(offset + np.arange(q_len), kv_len, window, q_ids[b], ids[b])
        _, *want, dsinks = _with_sinks(q[b], k[b], v[b], dout[b], allowed, sinks)
        want_dsinks = want_dsinks + dsinks
        for name, g, w in zip(("dq", "dk", "dv"), grads[:3], want, strict=True):
            np.testing.assert_allclose(np.asarray(g[b]), w, err_msg=f"{name}[{b}]", **TOL)
    np.testing.assert_allclose(np.asarray(grads[3]), want_dsinks, err_msg="dsinks", **TOL)


def test_jax_grad_through_attend_statistics_is_refused(kernel, emulation):
    """`attend`'s max_logits and logsumexp are residuals: upstream's backward takes no cotangent for them (its
    own kernel VJP drops one silently), so a loss through them is refused, naming them, before any number."""
    splash = kernel.splash
    q, k, v, _ = _operands(1, 2, 2, 16, 16, seed=1)
    spec = splash.MaskSpec.of(True, None)
    for index, name in ((1, "max_logits"), (2, "logsumexp")):
        def loss(q, index=index):  # noqa: ANN001, ANN202
            return jnp.sum(splash.attend(q, k, v, None, None, None, spec=spec)[index])

        with emulation.interpret_on_cpu("v6e"), kernel.ops.config.cross_compile(True), \
                pytest.raises(ValueError, match=rf"tokamax splash\.attend: .*{name}.*splash\.attend_vjp"):
            jax.grad(loss)(q)
