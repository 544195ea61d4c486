"""The LM head at training's rows of small heads on the v5e (`tools.chip.zoo.rows`; zoo shard 10 had the package's
defaults at 0.68-0.95x XLA's speed there): every way the rules weigh, timed beside XLA's in one run
(`fused.ROWS_RECORD`, 235962c), then the defaults the rules take now (0817c36). The records' claims, held against the
rules as they stand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.chip import predict

MEASURED = Path(__file__).resolve().parents[3] / "benchmarks/measured"
DEFAULTS = "v5e-2026-12-07-bench-lm_head_rows-defaults-0817c36.json"
FORWARD = "v5e-2026-12-07-bench-lm_head_rows-forward-0817c36.json"
STREAMED = "tokamax (chunks of 1024, streamed, compact, pair accumulator)"
UNCAPPED = ("Qwen3 0.6B", "Qwen3 1.7B", "Qwen3 4B")


def _by(name: str) -> dict[tuple[str, str, str, str], dict]:
    records = json.loads((MEASURED / name).read_text())["records"]
    return {(r["op"], r["case"], r["impl"], r["pass"]): r for r in records if r.get("median_s")}


def _case(model: str, by: dict) -> str:
    (case,) = {k[1] for k in by if k[1].startswith(f"{model} head: 4096 rows")}
    return case


def _sizes(case: str) -> tuple[int, int, int]:
    found = re.search(r"(\d+) rows, hidden (\d+), vocabulary (\d+)", case)
    return int(found[1]), int(found[2]), int(found[3])


@pytest.mark.kernels_ci
def test_at_4096_rows_the_labels_path_takes_the_streamed_way_the_chip_ran_fastest(kernel):
    """At Qwen3 0.6B's, 1.7B's and 4B's heads (4,096 rows, no soft cap): the rule takes the streamed kernels, which ran
    fastest of every way it weighs and within 5% of XLA's, where the rule before (the accumulator kernel in chunks of
    1,536-2,048) took 1.12-1.31x longer; the accumulator kernel's ways, with the pass making their G, within 15% of
    the model; and the default of the next run (0817c36) is that way, in its temporaries (the model's within the small
    buffers). XLA's float32 accumulator there held more than its model says (not what the rule takes)."""
    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    ways, now = _by(lm_head.fused.ROWS_RECORD), _by(DEFAULTS)
    for model in UNCAPPED:
        case = _case(model, ways)
        rows, hidden, vocab = _sizes(case)
        assert lm_head.fused.choose_scheme(rows, hidden, vocab, 2, v5e) == lm_head.fused.Scheme(
            1024, pair=True, streamed=True), case
        timed = {impl: r["median_s"] for (op, c, impl, p), r in ways.items()
                 if op == "lm_head_loss" and c == case and p == "fwd+bwd" and impl.startswith("tokamax (chunks of")
                 and impl != f"tokamax (chunks of {rows})"}  # one chunk of all the rows: past the share
        streamed = timed[STREAMED]
        assert streamed == min(timed.values()), (case, timed)
        xla = ways["lm_head_loss", case, "xla", "fwd+bwd"]["median_s"]
        assert streamed <= 1.05 * xla and ways["lm_head_loss", case, "tokamax", "fwd+bwd"]["median_s"] > 1.1 * streamed
        for impl, seconds in timed.items():
            if impl.endswith("accumulator kernel)"):
                modelled = predict.predicted(kernel, {"op": "lm_head_loss", "case": case, "impl": impl,
                                                      "pass": "fwd+bwd", "median_s": seconds}, commit="235962c")
                assert 0.85 <= modelled / seconds <= 1.15, (case, impl)
        ours = now["lm_head_loss", case, "tokamax", "fwd+bwd"]
        assert ours["assigned_temp_bytes"] == ways["lm_head_loss", case, STREAMED, "fwd+bwd"]["assigned_temp_bytes"]
        block = lm_head.streamed.block_for(1024, hidden, vocab, 2, v5e.vmem, 4, compact=True)
        model = lm_head.fused.streamed_cost(rows, hidden, vocab, 2, 1024, block, False)
        assert abs(model.temp_bytes - ours["assigned_temp_bytes"]) <= lm_head.fused.SMALL_BUFFERS, case
        assert ours["median_s"] <= 1.05 * now["lm_head_loss", case, "xla", "fwd+bwd"]["median_s"], case
    # the float32 accumulator's temporaries where the logits outweigh it: the chip held both, the model the larger
    plain = ways["lm_head_loss", _case("Qwen3 0.6B", ways), "tokamax (chunks of 1024)", "fwd+bwd"]
    modelled = lm_head.fused.cost(4096, 1024, 151936, 2, 1024, kind="TPU v5 lite").temp_bytes
    assert plain["temp_bytes"] - modelled > 500 << 20, (plain["temp_bytes"], modelled)


@pytest.mark.kernels_ci
def test_past_1024_rows_the_forward_is_xlas_formulation_in_chunks_at_xlas_time(kernel):
    """The labels path's forward at 4,096 rows: the kernel (the rule before) took 1.17-1.44x XLA's time; XLA's
    formulation in chunks of 1,024 (the rule now) within 4% of it at every small head, Gemma 2's soft cap included,
    in about a quarter of its temporaries; at the benchmark's heads within 9% in a sixth or less, faster than the
    kernel ran there; chunks of 1,024 never slower than 2,048 or 4,096 (not past the share either); first calls under
    10 s."""
    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    before, now, chunks = _by(lm_head.fused.ROWS_RECORD), _by(DEFAULTS), _by(FORWARD)
    for model in (*UNCAPPED, "Gemma 2 2B"):
        case = _case(model, before)
        rows, hidden, vocab = _sizes(case)
        assert lm_head.stats.xla_forward(rows, hidden, vocab, 2, v5e), case
        xla = now["lm_head_loss", case, "xla", "fwd"]
        kernel_s = before["lm_head_loss", case, "tokamax", "fwd"]["median_s"]
        ours = now["lm_head_loss", case, "tokamax", "fwd"]
        assert kernel_s > 1.15 * xla["median_s"] and ours["median_s"] <= 1.045 * xla["median_s"], case
        assert 3.5 * ours["assigned_temp_bytes"] <= xla["assigned_temp_bytes"], case
        assert ours["compile_s"] + ours.get("first_run_s", 0) < 10, case
    for case in {k[1] for k in chunks if " head: 4096 rows" not in k[1]}:  # the benchmark's heads
        rows, hidden, vocab = _sizes(case)
        assert lm_head.stats.xla_forward(rows, hidden, vocab, 2, v5e), case
        ours, xla = now["lm_head_loss", case, "tokamax", "fwd"], now["lm_head_loss", case, "xla", "fwd"]
        assert ours["median_s"] <= 1.09 * xla["median_s"], case
        assert 6 * ours["assigned_temp_bytes"] <= xla["assigned_temp_bytes"], case
        assert ours["median_s"] < lm_head.plan.choose(rows, hidden, vocab, 2, v5e).costs(
            hidden, vocab, 2)["forward"].seconds(v5e), case  # the kernel, whose model the chip has held to 10%
    for case in {k[1] for k in chunks}:
        timed = {k[2]: r["median_s"] for k, r in chunks.items() if k[1] == case}
        rows = _sizes(case)[0]
        by_1024 = timed["tokamax (XLA's formulation, chunks of 1024)"]
        assert all(by_1024 <= 1.02 * timed[f"tokamax (XLA's formulation, chunks of {c})"]
                   for c in (2048, 4096) if c < rows), (case, timed)


@pytest.mark.kernels_ci
def test_the_defaults_first_calls_at_4096_rows_compiled_alone_are_under_10_s():
    """The package's defaults at the rows run's heads and pairs, compiled one at a time as a user's program is
    (`--jobs 1`, c08f1e4): every first call (compile and first run) under 10 s, the streamed way's 5.8-6.8 s (six
    compiles at once had put it at 7.9-12.7 s in the defaults run)."""
    alone = _by("v5e-2026-12-07-bench-lm_head_rows-alone-c08f1e4.json")
    assert len(alone) == 14
    for key, r in alone.items():
        assert key[2] == "tokamax" and r["compile_s"] + r["first_run_s"] < 10, key
