"""The chip's Torch-mode scripts without a chip: each configuration in its own child (one that aborts is a record and
the next still runs; one out of HBM runs again a layer shorter, then the other impl at that count), the kernel's side
first, and no peak HBM figure past the chip's memory. The children are fakes (a few lines of Python each)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.torch_chip import isolate, memory, steps, trl_steps

pytestmark = pytest.mark.kernels_ci

# a fake child: reads its configuration, then aborts, fails as torch-tpu does out of memory, or answers
FAKE = """
import json, os, sys
config = json.loads(sys.argv[1])
out = os.environ["TORCH_CHIP_CHILD_OUT"]
def answer(data):
    open(out, "w").write(json.dumps(data))
if config["kind"] == "peak":
    answer({"matmul": "fake", "median_s": 1.0, "first_s": 1.0, "flops_per_s": 100.0})
elif config["impl"] == "tokamax" and config["model"] == "llama3_8b":
    print("F0000 windowing_util.cc:317] Check failed: desc->window_bounds.size() == rank (0 vs. 1)", flush=True)
    print("*** stack dump ***\\n" * 20, file=sys.stderr, flush=True)
    os.abort()
elif config["impl"] == "torch" and config["model"] == "llama3_8b" and config["layers"] > 1:
    answer({"error": "RuntimeError: a required argument is in a failed state", "traceback": "Traceback ..."})
else:
    answer({"median_s": 2.0, "first_step_s": 3.0, "model_flops": 50.0, "parameters": 7,
            "context": {"chip": "TPU fake", "device": "tpu"}})
"""


def fake(config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-c", FAKE, json.dumps(config)]


def test_an_aborted_child_is_a_record_and_the_next_runs(tmp_path: Path) -> None:
    path = steps.run(tmp_path / "steps.json", "c0ffee", False, models=["llama3_8b", "olmoe_1b_7b"], tokens=[4096],
                     command=fake, config_timeout_s=30)
    data = json.loads(path.read_text())
    assert data["chip"] == "TPU fake" and data["matmul_peak"]["flops_per_s"] == 100.0
    rows = [(r["case"], r["impl"], r["layers"]) for r in data["records"]]
    assert rows == [("llama3_8b/4096", "tokamax", 2), ("llama3_8b/4096", "torch", 2),  # the kernel's side first
                    ("llama3_8b/4096", "torch", 1), ("llama3_8b/4096", "tokamax", 1),  # out of HBM: a layer less
                    ("olmoe_1b_7b/4096", "tokamax", 3), ("olmoe_1b_7b/4096", "torch", 3)]
    aborted, oom, fitted = data["records"][:3]
    assert aborted["median_s"] is None and "signal 6 (SIGABRT)" in aborted["error"]
    assert any("Check failed" in line for line in aborted["log_key_lines"])  # kept past the stack dump
    assert len(aborted["log_tail"]) == isolate.TAIL_LINES
    assert oom["error"].startswith("out of HBM (most likely") and oom["out_of_hbm"]
    assert fitted["median_s"] == 2.0 and fitted["mfu"] == 50.0 / 2.0 / 100.0 and fitted["layers_cut_from"] == 2
    assert (tmp_path / "steps-logs" / "llama3_8b-4096-tokamax-2l.log").exists()


def test_a_child_past_its_time_is_killed_and_the_budget_stops_new_ones(tmp_path: Path) -> None:
    def slow(config: dict[str, Any]) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    path = trl_steps.run(tmp_path / "trl.json", "c0ffee", True, cases=["sft", "dpo"], command=slow,
                         config_timeout_s=1.5, budget_s=2.0)
    records = json.loads(path.read_text())["records"]
    assert [(r["case"], r["impl"]) for r in records] == [("sft", "tokamax"), ("sft", "trl"), ("dpo", "tokamax"),
                                                          ("dpo", "trl")]
    assert records[0]["error"].startswith("killed: past its time limit")
    assert all(r["error"].startswith("not run: the time budget") for r in records[2:])


def test_peak_hbm_past_the_chip_is_null_with_the_reason() -> None:
    limit = 16 * 1024**3
    assert memory.checked(5 * 1024**3, "src", limit, "v5e") == {"peak_hbm_bytes": 5 * 1024**3,
                                                                "peak_hbm_source": "src"}
    bad = memory.checked(139_472_310_290_760, "torch.accelerator.memory_stats", limit, "v5e")
    assert bad["peak_hbm_bytes"] is None
    assert "gave 139,472,310,290,760 bytes, more than the chip's HBM" in bad["peak_hbm_error"]
