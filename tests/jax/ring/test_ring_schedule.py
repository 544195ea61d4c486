"""`tokamax.ring`'s schedules and layouts, on the host (no kernel runs here: the values on 8 host
devices are tests/torch/ops/test_ring_attention.py's, the exports for 8 chips too):

- every call's block schedule, made from positions, equal to the static grid upstream's own mask
  processing makes from the dense [q, kv] mask of that call (the chip's queries against the KV run it
  holds at that step), forward and dK/dV, on the contiguous and the head-tail ring, causal and
  windowed, at lengths off the large blocks;
- the balance: per ring step, the busiest chip's non-empty KV blocks, plain against head-tail (the
  figure every step waits on), and the same total work;
- the layout helpers: a permutation and its inverse, each chip's positions, refusals.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.jax.cases import resolver

SPLASH = "_src.ops.experimental.tpu.splash_attention"


def _dense(seq_len: int, causal: bool, window: tuple | None) -> np.ndarray:
    i, j = np.arange(seq_len)[:, None], np.arange(seq_len)[None]
    allowed = j <= i if causal else np.ones((seq_len, seq_len), bool)
    if window is not None:
        allowed = allowed & (j >= i - window[0]) & (j <= i + window[1])
    return allowed


@pytest.mark.kernels_ci
@pytest.mark.parametrize("balanced", [False, True], ids=["contiguous", "head-tail"])
@pytest.mark.parametrize(("causal", "window"), [(True, None), (True, (300, 0)), (False, (100, 100))],
                         ids=["causal", "causal-window", "two-sided-window"])
def test_each_calls_schedule_equals_upstreams_from_the_dense_mask(kernel, balanced, causal, window):
    ring = kernel.ring
    masks, info = (resolver(f"{kernel.__name__}._ported")(f"{SPLASH}.{m}")
                   for m in ("splash_attention_mask", "splash_attention_mask_info"))
    spec = kernel.splash.masks.MaskSpec.of(causal, window)
    size, local, block = 4, 512, 128
    seq = size * local
    dense = _dense(seq, causal, window)
    runs = 2 if balanced else 1
    run_len = local // runs
    positions = [ring.layout.chip_positions(r, local, size, balanced) for r in range(size)]
    for chip in range(size):
        for step in range(size):
            kv = positions[(chip - step) % size]
            for run in range(runs):
                keys = kv[run * run_len:(run + 1) * run_len]
                call = dense[np.ix_(positions[chip], keys)]
                for is_dkv in (False, True):
                    ours = ring.schedule.call_info(spec, jnp.asarray(positions[chip] - keys[0]), run_len, block, block,
                                                   is_dkv=is_dkv)
                    theirs, _ = info._process_mask(masks.NumpyMask(call), (block, block), is_dkv=is_dkv,
                                                   return_dynamic_grid=False)
                    where = f"chip {chip} step {step} run {run} dkv {is_dkv}"
                    grid = (len(positions[chip]) // block) * (run_len // block)
                    # upstream's processing returns no block mask where every block is full
                    want = np.full(grid, 2, np.int8) if theirs.block_mask is None else np.asarray(theirs.block_mask)
                    got = np.full(want.shape, 2, np.int8) if ours.block_mask is None else np.asarray(ours.block_mask)
                    np.testing.assert_array_equal(got, want, err_msg=where)
    info._process_mask.cache_clear()


@pytest.mark.kernels_ci
def test_head_tail_balances_every_step(kernel):
    """Causal, 8 chips, 32768 tokens in 128-token blocks: on the contiguous ring the busiest chip computes
    a full slice of blocks at every step while others idle; head-tail spreads the same total so that
    every chip's count is within one block row of the others at every step."""
    schedule = kernel.ring.schedule
    plain = schedule.busiest_step(32768, 8, False, 128)
    balanced = schedule.busiest_step(32768, 8, True, 128)
    assert plain["total"] == balanced["total"] == (256 * 257) // 2  # every causal block once
    rows = 4096 // 128  # one chip's query blocks
    assert plain["max"] == rows * rows  # a full [4096, 4096] slice of blocks
    assert balanced["max"] <= plain["max"] // 2 + rows
    for counts in balanced["chips_per_step"]:
        assert max(counts) - min(counts) <= rows, counts
    assert sum(plain["per_step"]) > 1.8 * sum(balanced["per_step"])  # what the ring's steps wait on, summed


@pytest.mark.kernels_ci
@pytest.mark.parametrize("size", [1, 3, 8])
def test_layout_is_a_permutation_and_each_chip_holds_its_chunks(kernel, size):
    layout = kernel.ring.layout
    seq = 2 * size * 16
    order = layout.order(seq, size, True)
    assert sorted(order.tolist()) == list(range(seq))
    np.testing.assert_array_equal(order[layout.inverse(seq, size, True)], np.arange(seq))
    for chip in range(size):
        np.testing.assert_array_equal(layout.chip_positions(chip, seq // size, size, True),
                                      order[chip * seq // size:(chip + 1) * seq // size])
    x = np.arange(3 * seq).reshape(3, seq)
    np.testing.assert_array_equal(layout.from_ring_layout(layout.to_ring_layout(x, size, axis=1), size, axis=1), x)
    np.testing.assert_array_equal(layout.order(seq, size, False), np.arange(seq))
    with pytest.raises(ValueError, match="tokamax ring: a sequence of 30 tokens does not split into 2 x ring_size"):
        layout.order(30, 4, True)


@pytest.mark.kernels_ci
def test_the_schedule_is_made_in_the_graph(kernel):
    """No mask array reaches the module: the call's schedule is computed from the positions inside it, so
    its lowering at 1M tokens is as small as at 4096 (the per-call grid is the only size that grows)."""
    schedule, spec = kernel.ring.schedule, kernel.splash.masks.MaskSpec("causal")

    def lowered(local: int) -> str:
        fn = jax.jit(lambda q_pos: schedule.call_info(spec, q_pos, local // 2, 1024, 1024, is_dkv=False).block_mask)
        return fn.trace(jax.ShapeDtypeStruct((local,), jnp.int32)).lower().as_text()

    small, large = lowered(4096), lowered(131072)
    assert len(large) < 2 * len(small), (len(small), len(large))


@pytest.mark.kernels_ci
def test_a_call_too_large_for_smem_is_refused_before_anything_is_built(kernel):
    """4M tokens on 8 chips, contiguous: 512 x 512 pairs of 1024-token blocks per call, 4.4 MB of schedule
    against a v6e's 1 MiB of SMEM; refused naming the pairs, the bytes and what to do."""
    schedule = kernel.ring.schedule
    with kernel.emulation.emulated_chip("v6e"):
        message = (r"tokamax ring_attention: the forward kernel of one ring call schedules up to 262144 \(q block, KV "
                   r"block\) pairs of 1024 x 1024 tokens .* 4456448 bytes, over the chip's 1048576 .* use more chips")
        with pytest.raises(ValueError, match=message):
            schedule.check_smem(524288, 524288, 1024, 1024, "forward")
        schedule.check_smem(131072, 65536, 1024, 1024, "forward")  # 1M tokens, 8 chips, head-tail: 139 kB
