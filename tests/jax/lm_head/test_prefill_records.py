"""The chip's runs behind the prefill rule (`fused.ONE_CHUNK`: one chunk of all the rows, XLA's formulation, below
the smallest chunk; `stored.WHOLE`: one backward step over the whole vocabulary where the rows are one chunk). The
v5e ran the package before the rule (`...-base.json`, beside XLA in the same run) and with it (`...-patched.json`,
the package alone, minutes later in the same session); at 256 rows the base run's file was cut by its command's time
limit, so XLA's and the old rule's times there are shard 6's (6c78e5c: the same LM head code, the same baseline).
CI has no chip: these read what it measured, and hold the rule to the choice those runs made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.chip import predict
from tools.chip.zoo.table import seconds

MEASURED = Path(__file__).resolve().parents[3] / "benchmarks/measured"
SHARD6 = "v5e-2026-12-07-zoo-shard6of56-6c78e5c.json"


def _records(name: str) -> list[dict]:
    return json.loads((MEASURED / name).read_text())["records"]


def _by(records: list[dict], op: str, pass_: str) -> dict[str, dict[str, dict]]:
    """case -> impl -> record, for the runs that have a time."""
    out: dict[str, dict[str, dict]] = {}
    for r in records:
        if r["op"] == op and r["pass"] == pass_ and r.get("median_s"):
            out.setdefault(r["case"], {})[r["impl"]] = r
    return out


def _shape(case: str) -> tuple[int, int, int]:
    """(rows, hidden, vocab) of a zoo case ("1024 tokens, hidden 2048, vocabulary 128256, ...")."""
    words = case.replace(",", "").split()
    return int(words[0]), int(words[3]), int(words[5])


def _alternative(impls: dict[str, dict], time) -> float:  # noqa: ANN001
    return min(time(r) for impl, r in impls.items() if impl != "tokamax")


@pytest.mark.kernels_ci
def test_at_1024_rows_the_statistics_backward_in_one_step_is_at_xlas_speed_and_faster_than_the_steps(kernel):
    """TRL's statistics, forward and backward, issued back to back: 0.75-0.83x XLA's speed in steps of 8,192
    columns, 1.01-1.08x in one step (Llama 3.2 1B, Gemma 2 2B's soft cap, Qwen2.5 7B and 72B heads)."""
    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    patched = _by(_records(lm_head.stored.WHOLE), "lm_head_statistics", "fwd+bwd")
    base = _by(_records(lm_head.stored.WHOLE.replace("-patched", "-base")), "lm_head_statistics", "fwd+bwd")
    assert len(patched) == 4
    for case, impls in patched.items():
        new, old = seconds(impls["tokamax"]), seconds(base[case]["tokamax"])
        assert _alternative(base[case], seconds) >= 0.97 * new, case  # the 3%
        assert new <= 0.85 * old, case
        rows, hidden, vocab = _shape(case)
        soft_cap = "soft cap" in case
        # the layout those runs took is the one chosen now, but under a soft cap: that run kept no row (it predates
        # `stored.KEPT_LOGITS`, which keeps the one chunk's float32 logits there; the chip has not run it yet)
        assert lm_head.stored.layout(rows, vocab, 2, v5e, hidden, soft_cap=soft_cap) == lm_head.stored.Layout(
            rows, rows, vocab), case


@pytest.mark.kernels_ci
@pytest.mark.parametrize("op", ["lm_head_loss", "lm_head_statistics"])
def test_at_256_rows_one_chunk_is_at_xlas_speed_where_the_kernels_and_the_steps_were_not(kernel, op):
    """Forward and backward at 256 rows, medians: the labels path at 0.72x XLA's speed through the kernels and the
    statistics at 0.44-0.58x in steps, both at XLA's speed or faster in one chunk (Qwen2.5 7B's and 72B's heads, the
    cases shard 6 shares with the run)."""
    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    patched = _by(_records(lm_head.fused.ONE_CHUNK), op, "fwd+bwd")
    base = _by(_records(SHARD6), op, "fwd+bwd")
    shared = sorted(set(patched) & set(base))
    assert len(shared) == 2, shared
    for case in shared:
        new, old = patched[case]["tokamax"]["median_s"], base[case]["tokamax"]["median_s"]
        assert _alternative(base[case], lambda r: r["median_s"]) >= 0.97 * new, case
        assert new <= 0.75 * old, case
        _, hidden, _ = _shape(case)
        if op == "lm_head_loss":
            assert lm_head.fused.choose_scheme(256, hidden, 152064, 2, v5e) == lm_head.fused.Scheme(256), case
        else:
            assert lm_head.stats.choose_layout(256, hidden, 152064, 2, on=v5e) == lm_head.stored.Layout(256, 256,
                                                                                                        152064)


@pytest.mark.kernels_ci
def test_the_forward_at_1024_rows_runs_at_xlas_time_and_its_first_call_in_seconds(kernel):
    """The labels path's forward (`row_stats`, the loss's statistics) at 1,024 rows: the kernel took 0.80-0.95x
    XLA's speed, its first calls 11.5-26.1 s (`stats.xla_forward`'s record). Where the cost model puts XLA's
    formulation under the kernel it now runs that: at XLA's time within 3% and compiled in seconds. The model's XLA
    time is within 10% of XLA's four measured ones."""
    lm_head, v5e = kernel.lm_head, predict.v5e(kernel)
    now = _by(_records("v5e-2026-12-07-zoo-lmhead-fwd-1024-7e630cf.json"), "lm_head_loss", "fwd")
    before = _by(_records(lm_head.stored.WHOLE.replace("-patched", "-base")), "lm_head_loss", "fwd")
    assert len(now) == 3 and len(before) == 4
    for case, impls in now.items():
        ours = impls["tokamax"]
        assert seconds(impls["xla"]) >= 0.97 * seconds(ours), case
        assert ours["compile_s"] + ours["first_run_s"] < 10 < before[case]["tokamax"]["compile_s"], case
    for case, impls in before.items():
        rows, hidden, vocab = _shape(case)
        assert lm_head.stats.xla_forward(rows, hidden, vocab, 2, v5e), case
        modelled = lm_head.stats.xla_forward_seconds(rows, hidden, vocab, 2, v5e)
        assert abs(modelled / impls["xla"]["median_s"] - 1) < 0.1, (case, modelled)


@pytest.mark.kernels_ci
def test_at_128_rows_the_statistics_take_the_one_chunk_layout_that_ran_at_xlas_speed(kernel):
    """TRL's statistics at 128 rows of the zoo's ten heads, forward and backward, issued back to back: the kernels
    (the rule before `lm_head.stored.ONE_STEP_DW`) at 1.09-1.70x XLA's time at nine of them; the one-chunk layout
    (the rule now, at every one of them) within 3% of XLA's and faster than the kernels were."""
    stats, v5e = kernel.lm_head.stats, predict.v5e(kernel)
    after = _by(_records(kernel.lm_head.stored.ONE_STEP_DW), "lm_head_statistics", "fwd+bwd")
    before = _by(_records("v5e-2026-12-07-zoo-prefill-distill-stats-128-512-44d0773.json"), "lm_head_statistics",
                 "fwd+bwd")
    assert len(after) == 10
    slower = 0
    for case, impls in after.items():
        rows, hidden, vocab = _shape(case)
        cap = kernel.lm_head.transform.LogitTransform.of(soft_cap=30.0) if "soft cap" in case else stats.IDENTITY
        assert stats.choose_scheme(rows, hidden, vocab, 2, cap, v5e) == "stored", case
        new, old = seconds(impls["tokamax"]), seconds(before[case]["tokamax"])
        assert new <= 1.03 * _alternative(impls, seconds), case
        assert new < old, case
        slower += old > 1.05 * _alternative(before[case], seconds)
    assert slower == 9
