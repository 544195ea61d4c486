"""Every splash call's block schedule is checked against the chip's SMEM before anything is built:
causal attention at 1024-token blocks fits up to 388 blocks (397,312 tokens) per kernel call on
v5e, v6e and v7x (1 MiB of SMEM per core, 64 KiB kept back), and a call past it, forward, backward
or at a run-time offset, is refused with the entries, the bytes, the chip's capacity and the ways out
(fewer tokens, a window, ring attention); traced on abstract shapes, so the refusal is seen at 1M
tokens without allocating anything of that size."""

from __future__ import annotations

import tracemalloc

import jax
import jax.numpy as jnp
import pytest

pytestmark = pytest.mark.kernels_ci

HEADS, KV_HEADS, DIM = 8, 2, 128


def _shapes(q_len: int, kv_len: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    q = jax.ShapeDtypeStruct((1, HEADS, q_len, DIM), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, KV_HEADS, kv_len, DIM), jnp.bfloat16)
    rows = jax.ShapeDtypeStruct((1, HEADS, q_len), jnp.float32)
    return q, kv, rows


def _trace(kernel, emulation, chip: str, fn, *shapes) -> None:  # noqa: ANN001
    with kernel.ops.config.cross_compile(True), emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        jax.jit(fn).trace(*shapes)


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_the_causal_limit_at_1024_token_blocks(kernel, emulation, chip):
    """388 blocks: 75,466 entries x 13 B (int16 indices) = 981,058 B <= 983,040; 389 blocks do not fit."""
    schedule, spec = kernel.splash.schedule, kernel.splash.MaskSpec("causal")
    with emulation.emulated_chip(chip):
        budget, capacity, _ = schedule.smem_budget()
        assert (budget, capacity) == (1024 * 1024 - 64 * 1024, 1024 * 1024)
        for blocks, fits in ((388, True), (389, False)):
            for is_dkv in (False, True):
                length = blocks * 1024
                plan = schedule.Schedule.of(spec, (length, length), 0, (1024, 1024), is_dkv=is_dkv)
                assert plan.entries == blocks * (blocks + 1) // 2
                assert (plan.smem_bytes(False) <= budget) == fits
                if fits:
                    plan.check_smem("forward", segments=False)
                else:
                    with pytest.raises(ValueError, match="SMEM"):
                        plan.check_smem("forward", segments=False)


def test_a_causal_call_at_1m_tokens_is_refused(kernel, emulation):
    splash = kernel.splash
    spec = splash.MaskSpec("causal")
    q, kv, rows = _shapes(1 << 20, 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as forward:
            _trace(kernel, emulation, "v6e", lambda q, k, v: splash.attend(q, k, v, None, None, None, spec=spec),
                   q, kv, kv)
        with pytest.raises(ValueError) as backward:
            _trace(kernel, emulation, "v6e", lambda q, k, v, o, m, lse, d: splash.attend_vjp(
                q, k, v, None, None, None, o, m, lse, d, spec=spec), q, kv, kv, q, rows, rows, q)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(forward.value)
    for part in ("tokamax splash attention", "forward kernel", "causal mask", "1048576 x 1048576 tokens",
                 "524,800 scheduled blocks x 13 B", "6,822,400 B", "TPU v6e", "1,048,576 B per core",
                 "fewer tokens", "sliding window", "ring attention"):
        assert part in message, f"{part!r} not in: {message}"
    assert "dK/dV backward kernel" in str(backward.value) and "6,822,400 B" in str(backward.value)
    assert peak < 32 << 20, f"refusing took {peak:,} B"  # q positions: 4 MiB; a 1M x 1M mask would be 1 TiB


def test_a_window_at_1m_tokens_fits(kernel, emulation):
    """A 4096-token window at 1M tokens schedules at most 5 blocks per row: 5,110 entries x 13 B."""
    splash = kernel.splash
    spec = splash.MaskSpec("local", 4095, 0)
    q, kv, _ = _shapes(1 << 20, 1 << 20)
    plan = splash.schedule.Schedule.of(spec, (1 << 20, 1 << 20), 0, (1024, 1024), is_dkv=False)
    assert plan.entries == 5 * 1024 - (4 + 3 + 2 + 1) and plan.smem_bytes(False) == plan.entries * 13
    _trace(kernel, emulation, "v6e", lambda q, k, v: splash.attend(q, k, v, None, None, None, spec=spec), q, kv, kv)


def test_a_run_time_offset_call_past_smem_is_refused(kernel, emulation):
    """A 16384-token chunk (4 query heads per KV head: 65,536 kernel rows) against a 1M-slot cache: 64 x
    1024 blocks, each refined by the segment ids with int32 indices, 17 B: 1,114,112 B."""
    splash = kernel.splash
    spec = splash.MaskSpec("causal")
    q, kv, _ = _shapes(16384, 1 << 20)
    with pytest.raises(ValueError) as refused:
        _trace(kernel, emulation, "v6e", lambda q, k, v, o: splash.attend_at(q, k, v, None, None, o, None, spec=spec),
               q, kv, kv, jax.ShapeDtypeStruct((), jnp.int32))
    message = str(refused.value)
    assert "run-time-offset forward kernel" in message and "65,536 blocks x 17 B" in message, message
    assert "1,114,112 B" in message and "TPU v6e" in message, message
