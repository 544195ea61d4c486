"""The chip's Torch-mode scripts without a chip: each configuration in its own child (one that aborts is a record and
the next still runs; one out of HBM runs again a layer shorter, then the other impl at that count), the kernel's side
first, and no peak HBM figure past the chip's memory. The children are fakes (a few lines of Python each)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.torch_chip import isolate, memory, step_timer, steps, trl_steps

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


def test_a_killed_trainer_keeps_the_steps_it_finished(tmp_path: Path) -> None:
    """DPO on the chip ran past its limit in its 4th step: the steps before it and their phases are in the record,
    read back from the lines the step timer prints."""
    line = step_timer.STEP_LINE

    def two_steps_then_hang(config: dict[str, Any]) -> list[str]:
        return [sys.executable, "-c", f"import time; print('{line} 1 loss=30.5 backward=11 41.5'); print('noise'); "
                f"print('{line} 2 38.25', flush=True); time.sleep(60)"]

    path = trl_steps.run(tmp_path / "trl.json", "c0ffee", True, cases=["dpo"], impls=["trl"],
                         command=two_steps_then_hang, config_timeout_s=3.0)
    (r,) = json.loads(path.read_text())["records"]
    assert r["error"].startswith("killed: past its time limit") and r["median_s"] is None
    assert r["step_times_s"] == [41.5, 38.25] and r["steps"] == 2
    assert r["step_phases_s"] == [{"loss": 30.5, "backward": 11.0}, {}]


def test_the_step_timer_splits_a_trainers_step_at_its_seams(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The phases of a step are the loss (compute_loss, wrapped), the backward, the optimizer and the rest, and they
    add up to the step; the printed line reads back as the same figures."""
    import time

    class Trainer:  # the seams transformers' Trainer calls, in its order
        def __init__(self) -> None:
            self.callbacks: list[Any] = []

        def add_callback(self, callback: Any) -> None:
            self.callbacks.append(callback)

        def compute_loss(self, *args: Any, **kwargs: Any) -> float:
            time.sleep(0.02)
            return 1.0

        def step(self) -> None:
            (timer,) = self.callbacks
            timer.on_step_begin()
            assert self.compute_loss() == 1.0
            time.sleep(0.01)  # the backward
            timer.on_pre_optimizer_step()
            time.sleep(0.005)
            timer.on_optimizer_step()
            timer.on_step_end()

    trainer = Trainer()
    timer = step_timer.step_timer(trainer)
    trainer.step()
    (phases,) = timer.phases
    assert set(phases) == {"loss", "backward", "optimizer", "rest"}
    assert phases["loss"] >= 0.02 and phases["backward"] >= 0.01 and phases["optimizer"] >= 0.005
    assert sum(phases.values()) == pytest.approx(timer.times[0], abs=1e-5)
    log = tmp_path / "log"
    log.write_text(capsys.readouterr().out)
    ((seconds, read),) = step_timer.finished(log)
    assert seconds == pytest.approx(timer.times[0], abs=1e-6) and read == pytest.approx(phases, abs=1e-6)


def test_peak_hbm_past_the_chip_is_null_with_the_reason() -> None:
    limit = 16 * 1024**3
    assert memory.checked(5 * 1024**3, "src", limit, "v5e") == {"peak_hbm_bytes": 5 * 1024**3,
                                                                "peak_hbm_source": "src"}
    bad = memory.checked(139_472_310_290_760, "torch.accelerator.memory_stats", limit, "v5e")
    assert bad["peak_hbm_bytes"] is None
    assert "gave 139,472,310,290,760 bytes, more than the chip's HBM" in bad["peak_hbm_error"]


@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (1, False), (1, True), ((0, 2), False),
                                         ([], False)])
def test_the_nansum_stand_in_is_torchs_nansum(dim: Any, keepdim: bool) -> None:
    """torch-tpu 0.2.0 has no aten::nansum (TRL's GRPO sums its rewards with it): the stand-in the TRL children
    register on the chip gives torch's own answer on the CPU, NaNs counted as 0, in float64."""
    import torch

    from tools.torch_chip import missing_ops

    x = torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[0, 1, 2] = x[2, 4, 0] = float("nan")
    x[1] = float("nan")  # a whole slice of NaNs sums to 0
    kwargs = {} if dim is None else {"dim": dim}
    want = torch.nansum(x, keepdim=keepdim, **kwargs)
    got = missing_ops.nansum(x, dim, keepdim)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)  # a few float64 roundings of sums of 60 terms
    assert missing_ops.nansum(x.float(), 1, dtype=torch.float64).dtype == torch.float64


def test_the_stand_in_is_registered_for_the_tpus_dispatch_key_and_named_in_the_record(tmp_path: Path) -> None:
    import torch

    from tools.torch_chip import missing_ops

    assert missing_ops.register() == missing_ops.SUBSTITUTES
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::nansum", "PrivateUse1")
    assert torch.nansum(torch.tensor([1.0, float("nan"), 2.0])).item() == 3.0  # the CPU's own kernel untouched
    answer = ("import json, os; open(os.environ['TORCH_CHIP_CHILD_OUT'], 'w').write(json.dumps({'median_s': 1.0, "
              "'context': {'chip': 'TPU fake', 'device': 'tpu', 'substituted_ops': {'aten::nansum': 'x'}}}))")
    path = trl_steps.run(tmp_path / "trl.json", "c0ffee", True, cases=["grpo"], impls=["trl"],
                         command=lambda config: [sys.executable, "-c", answer], config_timeout_s=30)
    (r,) = json.loads(path.read_text())["records"]
    assert r["substituted_ops"] == {"aten::nansum": "x"} and r["median_s"] == 1.0


@pytest.mark.parametrize("case", ["sft", "dpo"])
def test_on_the_chip_every_batch_is_padded_to_one_shape(case: str) -> None:
    """torch-tpu compiles per shape: the chip's SFT and DPO batches are padded to a multiple of 128 tokens, so the
    texts' different lengths make one shape, not one per step (the tiny model stands in; `tiny=False` is the chip's
    trainer configuration)."""
    pytest.importorskip("trl")
    from tools.torch_chip.tokenizer import byte_tokenizer

    net = trl_steps.make_model("trl", "cpu", True)
    trainer = trl_steps.TRAINERS[case](net, byte_tokenizer(), trl_steps.arguments("cpu", True, 4), False)
    shapes = {tuple(v.shape[-1] for k, v in sorted(batch.items()) if k.endswith("input_ids"))
              for batch in trainer.get_train_dataloader()}
    assert len(shapes) == 1 and all(n % 128 == 0 for n in next(iter(shapes))), shapes


def test_torch_sdpa_is_torch_tpus_own_way_with_sdpa_attention() -> None:
    from tools.torch_chip import configs

    m = configs.model("llama3_8b", tiny=True)
    net = steps.build(m, "torch-sdpa", "cpu", None)
    assert net.config._attn_implementation == "sdpa"
    assert steps.build(m, "torch", "cpu", None).config._attn_implementation == "eager"


def test_once_an_impl_fits_smaller_the_kernels_side_runs_at_that_size_next(tmp_path: Path) -> None:
    """torch-tpu's sdpa fit Llama 3 8B at 1 layer of 4,096 tokens on the chip, eager attention at none: the kernel's
    1-layer step, the pair that makes the ratio, comes before eager attention's smaller tries."""
    script = FAKE.replace('elif config["impl"] == "tokamax" and config["model"] == "llama3_8b":', 'elif False:')
    script = script.replace('config["impl"] == "torch" and config["model"] == "llama3_8b" and config["layers"] > 1:',
                            '(config["impl"] == "torch-sdpa" and config["layers"] > 1) or config["impl"] == "torch":')
    path = steps.run(tmp_path / "steps.json", "c0ffee", False, models=["llama3_8b"], tokens=[4096],
                     impls=["tokamax", "torch-sdpa", "torch"],
                     command=lambda config: [sys.executable, "-c", script, json.dumps(config)], config_timeout_s=30)
    rows = [(r["case"], r["impl"], r["layers"], r["median_s"] is not None)
            for r in json.loads(path.read_text())["records"]]
    assert rows[:4] == [("llama3_8b/4096", "tokamax", 2, True), ("llama3_8b/4096", "torch-sdpa", 2, False),
                        ("llama3_8b/4096", "torch-sdpa", 1, True), ("llama3_8b/4096", "tokamax", 1, True)]


def test_out_of_hbm_at_one_layer_halves_the_tokens_then_the_other_impl_runs_at_that_size(tmp_path: Path) -> None:
    """torch-tpu's own path ran out of HBM at 1 layer of Llama 3 8B at 4,096 tokens: the fitting then halves the
    tokens, and the kernel's side runs again at the size that fit, for a ratio at one size."""
    oom_unless_small = FAKE.replace('config["layers"] > 1:', '(config["layers"] > 1 or config["tokens"] > 2048):')
    oom_unless_small = oom_unless_small.replace('elif config["impl"] == "tokamax" and config["model"] == "llama3_8b":',
                                                'elif False:')
    path = steps.run(tmp_path / "steps.json", "c0ffee", False, models=["llama3_8b"], tokens=[4096],
                     command=lambda config: [sys.executable, "-c", oom_unless_small, json.dumps(config)],
                     config_timeout_s=30)
    records = json.loads(path.read_text())["records"]
    assert [(r["case"], r["impl"], r["layers"], r["median_s"] is not None) for r in records] == [
        ("llama3_8b/4096", "tokamax", 2, True), ("llama3_8b/4096", "torch", 2, False),
        ("llama3_8b/4096", "torch", 1, False), ("llama3_8b/2048", "torch", 1, True),
        ("llama3_8b/2048", "tokamax", 1, True)]
    assert [r.get("tokens_cut_from") for r in records] == [None, None, None, 4096, 4096]
    assert steps._smaller("m", 1024, "torch", 1) is None  # not below MIN_FIT_TOKENS


def _slow_body(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    __import__("time").sleep(0.05)
    return total


def test_line_times_split_one_functions_time_by_its_lines() -> None:
    """Only the named function's lines are timed; a line's time includes what it calls (the sleep's line holds its
    0.05 s), and its hits count each time it ran."""
    from tools.torch_chip import line_times

    with line_times.traced(f"{__name__}:_slow_body") as times:
        assert _slow_body(3) == 3 and _slow_body(2) == 1
    slowest = times.slowest()
    assert "sleep(0.05)" in slowest[0]["source"] and slowest[0]["hits"] == 2
    assert 0.1 <= slowest[0]["seconds"] < 0.5
    assert {r["source"] for r in slowest} >= {"total += i", "return total"}
    assert next(r for r in slowest if r["source"] == "total += i")["hits"] == 5
    with line_times.traced(None) as nothing:
        assert nothing is None


@pytest.mark.parametrize("case", ["generate", "generate-static"])
def test_the_rollouts_use_the_cache_their_case_names(case: str) -> None:
    """GRPO's rollouts on the dynamic cache GRPO uses, and on a static one (every decode step the same shapes:
    what separates torch-tpu's per-step eager work from the kernel's on the chip). A tiny model on the CPU."""
    from unittest import mock

    import transformers

    cache = "static" if case == "generate-static" else "dynamic"
    real = transformers.StaticCache.__init__
    with mock.patch.object(transformers.StaticCache, "__init__", autospec=True, side_effect=real) as made:
        out = trl_steps.rollouts("trl", "cpu", True, cache)
    assert out["cache"] == cache and out["new_tokens"] == 8 and out["tokens_per_s"] > 0
    assert made.called == (cache == "static"), made.call_count
    # transformers compiles a static cache's step on the chip's devices only (`_valid_auto_compile_criteria`)
    assert out["dynamo"] == {"graph_breaks": 0, "unique_graphs": 0, "break_reasons": []}, out["dynamo"]
