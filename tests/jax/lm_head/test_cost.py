"""`tokamax.lm_head.cost`, the LM-head kernels' cost model: its figures counted from the definitions
(each array read once where its block index follows the outer grid axis, once per outer step where it
follows the inner one; the matmuls' 2 m n k; one exp per logit), and each `pallas_call` declaring
exactly the model's `pl.CostEstimate` in the lowered module. (tests/tpu_compile/test_lm_head_cost.py
checks that libtpu's `cost_analysis()` reports the same.)"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

KERNELS = ("forward", "backward_x", "backward_w")


def test_counts_follow_the_grid(kernel):
    lm_head = kernel.lm_head
    cost, blocks = lm_head.cost, lm_head.Blocks(256, 512)
    rows, hidden, vocab, s = 1024, 384, 2048, 2  # 4 row blocks, 4 vocabulary blocks
    x, w, vector, bias = rows * hidden * s, vocab * hidden * s, rows * 4, vocab * 4
    c = cost.costs(rows, hidden, vocab, s, blocks)
    assert c["forward"].grid == (4, 4) and c["backward_w"].grid == (4, 4)
    assert c["forward"].bytes_read == x + vector + 4 * (w + bias)
    assert c["forward"].bytes_written == 6 * vector
    assert c["backward_x"].bytes_read == x + 6 * vector + 4 * (w + bias)
    assert c["backward_x"].bytes_written == x
    assert c["backward_w"].bytes_read == w + bias + 4 * (x + 6 * vector)
    assert c["backward_w"].bytes_written == w + bias
    assert c["forward"].flops == 2 * rows * vocab * hidden
    assert c["backward_x"].flops == c["backward_w"].flops == 4 * rows * vocab * hidden
    assert c["forward"].transcendentals == rows * vocab + rows * 4 + 2 * rows
    assert c["backward_x"].transcendentals == rows * vocab
    assert cost.backward_w(rows, hidden, vocab, s, blocks, soft_cap=True).transcendentals == 2 * rows * vocab
    assert c["backward_x"].matmuls == ((256, 512, hidden), (256, hidden, 512))
    for name, k in c.items():
        assert k.vmem_bytes == blocks.kernel_vmem_bytes(name, hidden, s)
        assert k.arithmetic_intensity == k.flops / (k.bytes_read + k.bytes_written)
        assert k.estimate().bytes_accessed == k.bytes_accessed


def test_one_block_reads_each_array_once_and_larger_blocks_read_less(kernel):
    lm_head = kernel.lm_head
    cost = lm_head.cost
    rows, hidden, vocab = 512, 256, 1024
    whole = cost.forward(rows, hidden, vocab, 2, lm_head.Blocks(512, 1024))
    assert whole.bytes_read == (rows + vocab) * hidden * 2 + rows * 4 + vocab * 4
    small = cost.forward(rows, hidden, vocab, 2, lm_head.Blocks(128, 1024))
    assert small.bytes_read > whole.bytes_read and small.arithmetic_intensity < whole.arithmetic_intensity
    assert whole.mxu_fill(256) == 1.0 and cost.forward(128, 256, 128, 2, lm_head.Blocks(128, 128)).mxu_fill(256) == 0.25
    with pytest.raises(ValueError, match=r"tokamax lm_head: 500 rows must be a multiple of the row block \(128\)"):
        cost.forward(500, hidden, vocab, 2, lm_head.Blocks(128, 1024))


def test_the_last_vocabulary_block_costs_mxu_work_but_reads_only_the_weight(kernel):
    """A vocabulary of 1,000 in blocks of 512: two steps, the MXU working 1,024 columns, the DMA reading the
    1,000 weight rows there are (the bias padded to the grid); dw written as stored."""
    lm_head = kernel.lm_head
    rows, hidden, vocab, s = 512, 256, 1000, 2
    blocks = lm_head.Blocks(128, 512)
    c = lm_head.cost.costs(rows, hidden, vocab, s, blocks)
    assert c["forward"].grid == (4, 2) and c["backward_w"].grid == (2, 4)
    assert c["forward"].flops == 2 * rows * 1024 * hidden
    assert c["forward"].bytes_read == rows * hidden * s + rows * 4 + 4 * (vocab * hidden * s + 1024 * 4)
    assert c["backward_w"].bytes_written == vocab * hidden * s + vocab * 4


def test_the_roofline_takes_the_larger_of_mxu_and_hbm_time_and_a_cost_per_step(kernel):
    """The forward adds its online statistics' time per logit (measured on the v5e, scaled by the peak); the
    backward kernels keep none."""
    lm_head = kernel.lm_head
    cost = lm_head.cost
    on = cost.Chip("test", peak_flops=1e12, hbm_bandwidth=1e9, mxu=256, vmem=1 << 27)
    assert on.ridge == 1000
    k = cost.forward(256, 256, 1024, 2, lm_head.Blocks(128, 512))
    statistics = 256 * 1024 * cost.STATISTICS_SECONDS * kernel.roofline.MEASURED["TPU v5 lite"][0] / 1e12
    assert k.seconds(on) == pytest.approx(max(k.flops / (k.mxu_fill(256) * 1e12), k.bytes_accessed / 1e9)
                                          + 4 * cost.STEP_SECONDS + statistics)
    assert k.mxu_fill(256) == 0.5  # 128 rows on a 256-wide MXU
    dx = cost.backward_x(256, 256, 1024, 2, lm_head.Blocks(128, 512))
    assert dx.seconds(on) == pytest.approx(max(dx.flops / (dx.mxu_fill(256) * 1e12), dx.bytes_accessed / 1e9)
                                           + 4 * cost.STEP_SECONDS)


def test_the_calibrated_model_puts_the_v5es_lm_head_records_within_15_percent(kernel):
    """The forward's statistics and the chunked scheme's accumulator are the figures fitted to the v5e's first
    run: every LM-head record of the runs since too (the forward alone, the kernels' three, the chunked scheme at
    chunks of 512 to 8192, with the float32 and the pair accumulator, the inner loop's widths the package runs) within
    15% of what the model says, at both heads."""
    from tools.chip import predict, results, table

    checked = overstated = 0
    for path in table.bench_files():
        data = results.load(path)
        fastest: dict[tuple[str, str], float] = {}
        for r in data["records"]:
            if r.get("median_s"):
                key = (r["case"], r["pass"])
                fastest[key] = min(fastest.get(key, r["median_s"]), r["median_s"])
        for r in data["records"]:
            p = predict.predicted(kernel, r, commit=data["commit"])
            chunk = re.fullmatch(r"tokamax \(chunks of (\d+)\)", r["impl"])
            if r["op"] == "lm_head_loss" and p is None and chunk and r.get("median_s") \
                    and "soft cap" not in r["case"] and f" {chunk[1]} rows" not in r["case"]:  # not one chunk
                # XLA's small accumulators (`predict.SMALL_ACCUMULATOR`): overstated, never past 1.35x, and another
                # way faster on the chip in the same run
                rows, hidden, vocab = map(int, re.search(r"(\d+) rows, hidden (\d+), vocabulary (\d+)",
                                                         r["case"]).groups())
                p = kernel.lm_head.fused.cost(rows, hidden, vocab, 2, int(chunk[1])).seconds(predict.v5e(kernel))
                assert 1.0 <= p / r["median_s"] <= 1.35 and fastest[r["case"], r["pass"]] < 0.95 * r["median_s"], r
                overstated += 1
                continue
            if r["op"] != "lm_head_loss" or p is None:
                continue
            assert 0.85 <= p / r["median_s"] <= 1.15, (r["case"], r["impl"], r["pass"], p / r["median_s"])
            checked += 1
    assert overstated == 6, overstated  # chunks of 1,024 and 2,048 at fused.ROWS_RECORD's three heads
    assert checked >= 54, checked  # the records of the runs to 9aff1ec


def _declared(module: str) -> list[dict[str, int]]:
    """The cost_estimate of each Mosaic kernel in a lowered module."""
    return [{k: int(v) for k, v in re.findall(r"\\22(\w+)\\22:(\d+)", estimate)}
            for estimate in re.findall(r"\\22cost_estimate\\22: \{(.*?)\}", module)]


@pytest.mark.parametrize("which", list(KERNELS))
@pytest.mark.parametrize(("soft_cap", "vocab"), [(False, 1536), (True, 1536), (False, 1500)])
def test_each_kernel_declares_the_models_estimate(kernel, emulation, which, soft_cap, vocab):
    """At a vocabulary the blocks divide, and one whose last block runs past the weight (1,500 in 512s)."""
    lm_head = kernel.lm_head
    sd = jax.ShapeDtypeStruct
    rows, hidden, blocks = 768, 256, lm_head.Blocks(256, 512)
    t = lm_head.LogitTransform.of(soft_cap=30.0) if soft_cap else lm_head.IDENTITY
    specs = [sd((rows, hidden), jnp.bfloat16), sd((vocab, hidden), jnp.bfloat16), sd((1, 1536), jnp.float32),
             sd((rows,), jnp.int32)] + [sd((rows,), jnp.float32)] * (5 if which != "forward" else 0)
    call = getattr(lm_head.kernels, which)
    with emulation.emulated_chip("v6e"), jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        module = jax.jit(lambda *a: call(*a, transform=t, blocks=blocks, true_vocab=vocab)).trace(*specs).lower(
            lowering_platforms=("tpu",)).as_text()
    declared = _declared(module)
    assert len(declared) == 1, declared
    [got] = declared
    model = getattr(lm_head.cost, which)(rows, hidden, vocab, 2, blocks, soft_cap=soft_cap)
    assert (got["flops"], got["transcendentals"], got["bytes_accessed"]) == (
        model.flops, model.transcendentals, model.bytes_accessed)


def test_the_transposed_kernels_cost_the_same_bytes_and_flops(kernel):
    """On x.T and w.T every kernel reads and writes the same bytes and does the same flops; only the
    backward's second matmul changes shape (dx.T = w.T G.T, dw.T = x.T G)."""
    lm_head = kernel.lm_head
    rows, hidden, vocab, blocks = 1024, 2880, 2000, lm_head.Blocks(256, 512)
    plain = lm_head.cost.costs(rows, hidden, vocab, 2, blocks)
    flipped = lm_head.cost.costs(rows, hidden, vocab, 2, blocks, transposed=True)
    for name in KERNELS:
        a, b = plain[name], flipped[name]
        assert (a.grid, a.flops, a.transcendentals, a.bytes_read, a.bytes_written) == \
            (b.grid, b.flops, b.transcendentals, b.bytes_read, b.bytes_written), name
        assert b.vmem_bytes == blocks.kernel_vmem_bytes(name, hidden, 2, transposed=True)
    assert flipped["forward"].matmuls == plain["forward"].matmuls
    assert flipped["backward_x"].matmuls[1] == (hidden, 256, 512)
    assert flipped["backward_w"].matmuls[1] == (hidden, 512, 256)
