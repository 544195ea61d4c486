"""What a decode step against a static cache reads (`kv_slots_read`, from the schedule upstream's
kernel runs): only the KV blocks up to the step's slot, once per KV head (query heads fold, sinks
or not), and only the window's blocks for a window layer; counted, not timed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

pytestmark = pytest.mark.kernels_ci


def _reads(kernel, emulation, fill: int, *, slots: int = 4096, heads: int = 32, kv_heads: int = 4,  # noqa: ANN001
           window: int | None = None, sinks: bool = False) -> int:
    splash = kernel.splash
    sd = jax.ShapeDtypeStruct
    q, kv = sd((1, heads, 1, 128), jnp.bfloat16), sd((1, kv_heads, slots, 128), jnp.bfloat16)
    ids = (jnp.arange(slots) < fill).astype(jnp.int32)[None]
    spec = splash.MaskSpec.of(True, None if window is None else (window - 1, 0))
    sink_logits = jnp.zeros((heads,), jnp.float32) if sinks else None

    def count(q, k, v):  # noqa: ANN001, ANN202
        return splash.kv_slots_read(q, k, v, ids[:, fill - 1:fill], ids, jnp.int32(fill - 1), sink_logits, spec=spec)

    with emulation.emulated_chip("v6e"), kernel.ops.config.cross_compile(True):
        return int(jax.jit(count)(*(jnp.zeros(s.shape, s.dtype) for s in (q, kv, kv))))


def test_a_decode_step_reads_the_filled_blocks_only(kernel, emulation):
    # 4096 slots: upstream's config choice takes 1024-slot KV blocks; 4 KV heads, 8 query heads each, folded
    assert _reads(kernel, emulation, 37) == 1024 * 4
    assert _reads(kernel, emulation, 1500) == 2 * 1024 * 4
    assert _reads(kernel, emulation, 4096) == 4 * 1024 * 4


def test_sinks_fold_too(kernel, emulation):
    """With sinks (GPT-OSS) the heads fold as well (the sinks enter after the kernel)."""
    assert _reads(kernel, emulation, 1500, sinks=True) == 2 * 1024 * 4


def test_a_window_layer_reads_the_windows_blocks_only(kernel, emulation):
    """A 128-token window at slot 3999 of a 4096-slot cache: one 1024-slot block (3072-4095)."""
    assert _reads(kernel, emulation, 4000, window=128) == 1024 * 4
    assert _reads(kernel, emulation, 3100, window=128) == 2 * 1024 * 4  # window 2972-3099 spans two blocks
