"""Calls upstream's autotuning key cannot tell apart: splash attention with any mask but causal at offset 0
or full is keyed (upstream's public call binds it so) as a dense boolean mask of its shape, the shape
only. So every window, every causal offset but 0 and every run-time offset of one shape share one entry:
`tune` times the first on a random mask of that shape and the file applies it to all. `tune` says so,
naming the calls, in its skipped list; a causal call at offset 0 keeps a key of its own and is not named."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

Q_LEN, KV_LEN = 128, 256


def _call(kernel, op: str, **statics):  # noqa: ANN001, ANN202
    """A recorded splash call: its static arguments named as the Torch op's are (the JAX function's signature)."""
    splash = kernel.splash

    def splash_attention(q, k, v, causal, window_left, window_right, q_offset, autotuning):  # noqa: ANN001, ANN202
        window = None if window_left < 0 else (window_left, window_right)
        spec = splash.MaskSpec.of(causal, window)
        return splash.attend(q, k, v, None, None, None, spec=spec, offset=q_offset)

    q = jax.ShapeDtypeStruct((1, 1, Q_LEN, 128), jnp.float32)
    kv = jax.ShapeDtypeStruct((1, 1, KV_LEN, 128), jnp.float32)
    args = (q, kv, kv, statics["causal"], statics["window_left"], statics["window_right"], statics["q_offset"], "")
    return SimpleNamespace(op=op, jax_fn=splash_attention, args=args)


@pytest.fixture(scope="module")
def tuned(kernel):  # noqa: ANN001, ANN202
    calls = [_call(kernel, "window_64", causal=True, window_left=63, window_right=0, q_offset=128),
             _call(kernel, "window_16", causal=True, window_left=15, window_right=0, q_offset=128),
             _call(kernel, "causal_at_128", causal=True, window_left=-1, window_right=-1, q_offset=128),
             _call(kernel, "causal_at_0", causal=True, window_left=-1, window_right=-1, q_offset=0)]
    return kernel.tuning.tune_recording(kernel.tuning.Recording(calls), chip="v6e", max_configs=1,
                                        progress_bar=False)


def test_calls_of_one_shape_only_key_are_named_in_the_skipped_list(tuned):
    shared = ("window_64", "window_16", "causal_at_128")
    named = {s.op: s.reason for s in tuned.skipped}
    assert set(named) == set(shared), named
    for op, reason in named.items():
        assert "PallasMosaicTpuSplashAttention" in reason and f"{Q_LEN}x{KV_LEN}" in reason, reason
        assert "random" in reason and "applies it to every call of that key" in reason, reason
        for other in shared:  # each names the calls that share its entry, itself included, with their arguments
            assert other in reason, (op, reason)
        assert "window_left=63, window_right=0, q_offset=128" in reason, reason
        assert reason.startswith(f"not timed on its own mask: {op}(causal=True, "), reason


def test_they_share_one_entry_and_causal_at_zero_has_its_own(tuned):
    masks = [ba.arguments["mask"] for ba, _ in tuned.result.data]
    assert sorted((m.bool_mask is not None, m.is_causal) for m in masks) == [(False, True), (True, False)]
    assert tuned.entries == {"window_64": 1, "causal_at_0": 1}
