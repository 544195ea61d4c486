"""The chip tier's Torch-mode records (benchmarks/measured/torch, made on a TPU v5e by `python3 -m tools.torch_chip`):
whole, each figure consistent with the records it was computed from, every tokamax Torch op's numerics equal to the
JAX path's on the chip, every record without a time saying why, and docs/torch-chip.md's tables rendered from them.
CI has no chip: these read what one measured."""

from __future__ import annotations

import json
import math

import pytest

from tools.chip.check import RELATIVE
from tools.chip.results import REQUIRED
from tools.torch_chip import isolate, table

FILES = sorted(table.MEASURED.glob("*.json"))
KNOWN_MIRROR_FAILURES = {
    # b17c54c's mirror compared batched RPA's whole output, padding rows included (16 rows, 9 live): rows its
    # contract leaves unspecified. The mirror compares the live rows since 40d450b, and there they pass (4.7e-3).
    ("batched_rpa", "tests/torch/ops/test_batched_rpa.py::test_cpu_runs_upstreams_reference_matching_a_float64_"
                    "paged_attention[dtype0-1e-05]"),
    ("batched_rpa", "tests/torch/ops/test_batched_rpa.py::test_cpu_runs_upstreams_reference_matching_a_float64_"
                    "paged_attention[dtype1-0.02]"),
    # One query over one key: dq and dk are zero in exact arithmetic (a softmax over one key has no gradient). The
    # CPU's float32 left 1.9e-6, the chip's float32 matmuls (one bf16 pass, JAX's default precision) about 1.6e-2
    # of |do| |v| = 15.6 x 16.2: a relative error of two noises. dv, the gradient that is not zero, agrees (1.6e-3).
    ("splash_attention_bwd", "tests/torch/ops/test_splash_attention.py::test_any_length_unbatched[1-causal]"),
}


def _load(name: str) -> list[dict]:
    return [json.loads(f.read_text()) for f in FILES if f"-torch-{name}-" in f.name]


def _latest(name: str) -> dict:
    return max(_load(name), key=lambda d: d["started"])


@pytest.mark.kernels_ci
def test_every_file_is_whole_and_names_its_chip_stack_and_commit():
    assert {n for n in ("bridge", "mirror", "trl", "steps", "jaxside") if _load(n)} == {
        "bridge", "mirror", "trl", "steps", "jaxside"}
    for f in FILES:
        data = json.loads(f.read_text())
        named = data["chip"] in ("TPU v5e", "TPU v5 lite")
        # a steps or TRL run whose children all failed has no child that named the chip, and says so
        unnamed = data["chip"] == isolate.NOT_READ and all(r["median_s"] is None for r in data["records"])
        assert data["mode"] == "torch" and (named or unnamed) and len(data["commit"]) >= 7, f.name
        if data["side"] == "jax":  # a JAX side run alone: the JAX process holds the chip, no torch imported
            assert data["stack"]["jax"] == "0.10.2" and data["stack"]["torch"] is None, f.name
        else:
            assert data["stack"]["torch-tpu"] == "0.2.0" and data["stack"]["torch"].startswith("2.13.0"), f.name
        for r in data["records"]:
            assert all(k in r for k in REQUIRED), (f.name, r)
            assert r["median_s"] is not None or r.get("error") or r.get("status") in (
                "passed", "failed", "ran (no CPU answer)", "traced"), (f.name, r)  # nothing left unexplained


@pytest.mark.kernels_ci
@pytest.mark.parametrize("index", [0, 1])
def test_the_bridge_records_agree_with_the_jax_side_they_were_compared_with(index):
    data = sorted(_load("bridge"), key=lambda d: d["started"])[index]
    jax = {(r["case"], r["pass"]): r for r in data["jax_side"] if r["impl"] == "jax"}
    assert data["jax_side"] and {r["pass"] for r in data["jax_side"]} == {"fwd", "fwd+bwd"}
    ours = [r for r in data["records"] if r["impl"].startswith("tokamax")]
    assert len(ours) >= 10
    for r in ours:
        assert r["median_s"] is not None, r  # every tokamax way ran
        j = jax[(r["case"], r["pass"])]
        assert math.isclose(r["ratio_to_jax"], r["median_s"] / j["median_s"], rel_tol=1e-12)
        assert r["numerics"] == "passed", r
        assert all(e <= r["bounds"][k] for k, e in r["errors_vs_jax"].items()), r
        assert all(b <= RELATIVE for b in r["bounds"].values())


@pytest.mark.kernels_ci
def test_the_lm_heads_loss_from_torch_is_the_jax_paths_plus_the_finish_pass():
    """What the backward's one-pass scaling (torch_ops/_forward_grads.py) bought: 184.1 ms before (1.14x). With
    both sides on libtpu 0.0.52 (6c78e5c: 40d450b's 0.99x compared Torch on 0.0.52 with JAX on 0.0.42, whose head
    took 10 ms more), the custom op alone, which computes the loss and the unrounded gradients, is within 1.05x of
    the JAX path. The whole op is 1.064x: its backward scales dW's float32 accumulator by the loss's cotangent and
    rounds it once (read 2.1 GB, write 1.05 GB: 5.3 ms at the v5e's 590 GB/s), which the JAX path, whose cotangent
    is the constant 1, folds away. Issue 71's 1.05x is not met there; the bound below keeps it from growing."""
    data = max((d for d in _load("bridge") if any(r["op"] == "lm_head_loss" for r in d["records"])),
               key=lambda d: d["started"])  # the newest run with the head (d7264a3's timed splash alone)
    by = {r["impl"]: r for r in data["records"] if r["op"] == "lm_head_loss"}
    assert by["tokamax (torch, custom op alone)"]["ratio_to_jax"] <= 1.05, by
    assert by["tokamax (torch)"]["ratio_to_jax"] <= 1.07, by
    finish_s = (128_256 * 4_096 * (4 + 2)) / 590e9  # dW's float32 read and bf16 write, at the measured HBM rate
    gap_s = by["tokamax (torch)"]["median_s"] - by["tokamax (torch, custom op alone)"]["median_s"]
    assert finish_s <= gap_s <= finish_s + 3e-3, (gap_s, finish_s)  # the pass, and at most one call's launch


@pytest.mark.kernels_ci
def test_the_traces_show_the_grouped_matmuls_custom_op_at_the_jax_paths_device_time():
    """Where the bridge's time goes, from the chip's traces: the grouped matmul's custom op runs as long on the chip
    as the JAX path's program (torch-tpu compiles the same kernel), so what separates the two sides' wall times is
    each call's launch and wait and the benchmark's eager sum. (Splash's forward op also computes its residuals:
    docs/torch-chip.md.)"""
    (data,) = [d for d in _load("traces") if any(r["impl"] == "jax" for r in d["records"])]  # both sides traced
    device = {(r["impl"], r["case"]): r["device"]["XLA Modules"]["us_per_call"] for r in data["records"]
              if "XLA Modules" in r["device"]}  # a DEFER_AND_FUSE forward ran nothing while traced
    for shape in ("mixtral-8x7b-experts", "olmoe-experts"):
        ours, jax = device[("torch", f"{shape}-tokamax-torch-fwd")], device[("jax", f"{shape}-fwd")]
        assert ours <= 1.05 * jax, (shape, ours, jax)
    (bridge,) = [b for b in _load("bridge") if b["commit"] == data["commit"]]
    assert data["stack"] == bridge["stack"]  # the same session's run


@pytest.mark.kernels_ci
def test_the_mirrored_op_calls_failed_nowhere_but_the_recorded_gaps():
    records = [r for d in _load("mirror") for r in d["records"]]
    failed = {(r["op"], r["test"]) for r in records if r["status"] == "failed"}
    assert failed <= KNOWN_MIRROR_FAILURES, failed - KNOWN_MIRROR_FAILURES
    passed = {r["op"] for r in records if r["status"] == "passed"}
    assert {"distill_divergence", "distill_loss_grads", "lm_head_loss_grads", "forward_grads_scale", "gmm", "gmm_bwd",
            "splash_attention", "splash_attention_bwd", "lm_head_loss_rows", "lm_head_loss_rows_bwd",
            "batched_rpa", "fused_moe", "mhc_pre", "mhc_post", "mhc_fused_post_pre", "router_topk", "tgmm"} <= passed
    for r in records:
        if r["status"] == "error":
            assert r["error"], r


@pytest.mark.kernels_ci
def test_batched_rpas_live_rows_agree_on_the_chip():
    """The gap b17c54c's mirror recorded was its padding rows: compared on the live rows, the chip's kernel gives
    upstream's reference's answer, and writes the same cache."""
    newest = max((d for d in _load("mirror") if any(r["op"] == "batched_rpa" for r in d["records"])),
                 key=lambda d: d["started"])
    (r,) = [r for r in newest["records"] if r["op"] == "batched_rpa"]
    assert r["status"] == "passed" and "first 9 of 16 rows" in r["detail"] and "out1 0.0e+00" in r["detail"], r


@pytest.mark.kernels_ci
def test_the_docs_tables_are_rendered_from_the_records():
    assert table.section(table.PAGE.read_text()) == table.section(table.render()), \
        "docs/torch-chip.md's tables differ from benchmarks/measured/torch: python -m tools.torch_chip.table"


@pytest.mark.kernels_ci
def test_on_the_libtpu_torch_tpu_asks_for_every_model_trains_with_the_kernel_and_its_own_path_is_faster_or_fails():
    """The step records on libtpu 0.0.52 (joined by tools/torch_chip/libtpu_pack.py): every model's step ran with the
    kernel at some layer count, and torch-tpu's own path at the same model and tokens either ran at most 1/1.3 as
    fast at those layers (issue 71's bar) or did not run, for a reason recorded (out of HBM, past its time limit)."""
    runs = [d for d in _load("steps") if d["stack"]["libtpu"] == "0.0.52"]
    assert runs
    records = [r for d in runs for r in d["records"]]
    ran = {(r["case"], r["layers"]): r for r in records if r["impl"] == "tokamax" and r["median_s"] is not None}
    assert {case.split("/")[0] for case, _ in ran} == {"llama3_8b", "olmoe_1b_7b", "gemma3_4b"}
    for (case, layers), ours in ran.items():
        assert ours["tokens_per_s"] == pytest.approx(int(case.split("/")[1]) / ours["median_s"], rel=1e-9)
        theirs = [r for r in records if r["impl"] in ("torch", "torch-sdpa") and r["case"] == case]
        assert theirs, case
        for r in theirs:
            if r["median_s"] is not None and r["layers"] == layers:
                assert r["median_s"] >= 1.3 * ours["median_s"], (case, layers)
            elif r["median_s"] is None:
                assert r.get("out_of_hbm") or "time limit" in r["error"] or "budget" in r["error"], r


@pytest.mark.kernels_ci
def test_on_libtpu_0052_every_trl_trainer_ran_or_says_why_and_sft_is_faster_with_the_kernel():
    """TRL's trainers with batches padded to one shape (a3fbbfb on, libtpu 0.0.52): SFT, DPO and GRPO each ran on both
    sides with their step times, or the record says why (past its limit, the budget spent); SFT with the kernel's head
    is faster than TRL alone (1.45x), and its first loss is TRL's own to 1e-3 (the same model and batch)."""
    runs = [d for d in _load("trl") if d["stack"]["libtpu"] == "0.0.52" and d["commit"] == "a3fbbfb"]
    records = {(r["case"], r["impl"]): r for d in runs for r in d["records"] if r["median_s"] is not None}
    failed = [r for d in runs for r in d["records"] if r["median_s"] is None]
    assert {"sft", "grpo"} <= {case for case, impl in records if impl == "tokamax"}
    assert all("time limit" in r["error"] or "budget" in r["error"] for r in failed), failed
    for case in ("sft", "grpo"):
        ours, theirs = records[(case, "tokamax")], records[(case, "trl")]
        assert ours["fused_head_calls"]["kernel"] == ours["steps"] and theirs["fused_head_calls"] is None
        assert ours["median_s"] == sorted(ours["step_times_s"][1:])[1]  # the median of the 3 steps after the first
    sft, alone = records[("sft", "tokamax")], records[("sft", "trl")]
    assert sft["median_s"] * 1.3 < alone["median_s"]
    assert sft["loss_first"] == pytest.approx(alone["loss_first"], rel=1e-3)


@pytest.mark.kernels_ci
def test_dpos_steps_spend_their_time_in_the_loss_on_both_sides():
    """DPO ran its steps on both sides (40d450b, libtpu 0.0.52), about 22 s a step with the kernel's head and without
    it: the step timer's phases put over 90% of each step in the loss (the policy's and the reference's forward,
    launched, and TRL's metrics, which read the device back), the backward and the optimizer under 1 s. The kernel
    is not where DPO's time goes on that chip."""
    (data,) = [d for d in _load("trl") if d["commit"] == "40d450b"]
    dpo = {r["impl"]: r for r in data["records"] if r["case"] == "dpo"}
    assert set(dpo) == {"tokamax", "trl"}
    for r in dpo.values():
        assert r["median_s"] is not None and r["steps"] == 2 and len(r["step_phases_s"]) == 2, r
        for seconds, phases in zip(r["step_times_s"], r["step_phases_s"], strict=True):
            assert sum(phases.values()) == pytest.approx(seconds, rel=1e-3)
            assert phases["loss"] > 0.9 * seconds and phases["optimizer"] < 1.0
    assert dpo["tokamax"]["fused_head_calls"]["kernel"] == 4  # the policy's and the reference's forward, 2 steps
    assert dpo["tokamax"]["median_s"] < 1.1 * dpo["trl"]["median_s"]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("side_file", "bridge_commit"), [
    ("v5e-2026-12-06-torch-jaxside-dde9797.json", "40d450b"),  # JAX on the host's libtpu 0.0.42
    ("v5e-2026-12-07-torch-jaxside-6c78e5c-libtpu-0.0.52.json", "6c78e5c"),  # both sides on 0.0.52, one command
])
def test_the_torch_grouped_matmul_runs_at_jaxs_speed_when_jax_runs_it_as_two_programs(side_file, bridge_commit):
    """JAX's forward and backward as two programs, as Torch's autograd runs them: the Torch op, waited for, is
    within 1.05x of it at both grouped-matmul shapes, where the JAX path's one program is up to 1.17x (OLMoE) away;
    the two programs' gradients are the one program's. Splash's two programs (6c78e5c on) pass the forward's
    residuals as the Torch op does; dde9797's recomputed the forward, so it was no bar there."""
    (side,) = [json.loads(f.read_text()) for f in FILES if f.name == side_file]
    bridge = next(b for b in _load("bridge") if b["commit"] == bridge_commit)
    torch_by = {r["case"]: r for r in bridge["records"] if r["impl"] == "tokamax (torch)" and r["pass"] == "fwd+bwd"}
    one = {r["case"]: r for r in side["records"] if r["impl"] == "jax" and r["pass"] == "fwd+bwd"}
    two = {r["case"]: r for r in side["records"] if r["impl"].startswith("jax (fwd, then bwd")}
    assert set(two) == {c for c, r in one.items() if r["op"] != "lm_head_loss"}
    for case, r in two.items():
        assert r["grad_norms"] == pytest.approx(one[case]["grad_norms"], rel=1e-6), case
    for case in (c for c, r in two.items() if r["op"] == "grouped_matmul"):
        assert torch_by[case]["median_s"] <= 1.05 * two[case]["median_s"], case


@pytest.mark.kernels_ci
def test_splash_from_torch_is_within_5_percent_of_jax_passing_its_residuals_when_issued_back_to_back():
    """Splash at 8k tokens with both sides on libtpu 0.0.52 (6c78e5c): over JAX's one program the Torch op is 1.125x
    waited. JAX's own forward and backward as two programs, the forward's residuals (output, log-sum-exp) passed
    as the Torch op passes them, are 1.05x the one program: the split's share. Over that split the Torch op is
    1.03x issued back to back (a training loop's way) and 1.07x with a wait after each call (each of its two
    calls' launch and wait)."""
    (side,) = [json.loads(f.read_text()) for f in FILES if f.name.endswith("jaxside-6c78e5c-libtpu-0.0.52.json")]
    bridge = next(b for b in _load("bridge") if b["commit"] == "6c78e5c")
    (ours,) = [r for r in bridge["records"] if r["op"] == "attention" and r["impl"] == "tokamax (torch)"
               and r["pass"] == "fwd+bwd"]
    (two,) = [r for r in side["records"] if r["op"] == "attention" and r["impl"].startswith("jax (fwd, then bwd")]
    assert two["backward_takes"] == "the forward's residuals"
    assert ours["pipelined_s"] <= 1.05 * two["pipelined_s"], (ours, two)
    assert ours["median_s"] <= 1.08 * two["median_s"], (ours, two)


@pytest.mark.kernels_ci
def test_llama_3_8bs_step_is_at_least_1_3x_faster_with_the_kernel_than_with_torch_tpus_sdpa():
    """The like-for-like pair (6c78e5c, libtpu 0.0.52): 1 layer of Llama 3 8B at 4,096 tokens, forward, backward and
    AdamW, where torch-tpu's SDPA fits (at 2 layers it runs out of HBM; the kernel's step fits 2). Issue 71's bar."""
    data = next(d for d in _load("steps") if d["commit"] == "6c78e5c")
    by = {r["impl"]: r for r in data["records"] if r["case"] == "llama3_8b/4096" and r["layers"] == 1}
    ours, sdpa = by["tokamax"], by["torch-sdpa"]
    assert ours["loss_first"] == pytest.approx(sdpa["loss_first"], rel=1e-3)  # the same model and batch
    assert sdpa["median_s"] >= 1.3 * ours["median_s"], (ours["median_s"], sdpa["median_s"])
    assert ours["peak_hbm_bytes"] < sdpa["peak_hbm_bytes"]


def _bridge_pair(commit: str) -> tuple[dict, dict]:
    """The bridge record of `commit` and the JAX side it was compared with (one command, both on libtpu 0.0.52)."""
    bridge = next(b for b in _load("bridge") if b["commit"] == commit)
    (side,) = [d for d in _load("jaxside") if d["commit"] == commit]
    assert bridge["stack"]["libtpu"] == side["stack"]["libtpu"] == bridge["jax_side_stack"]["libtpu"] == "0.0.52"
    return bridge, side


@pytest.mark.kernels_ci
def test_with_its_cotangent_given_the_torch_grouped_matmul_is_within_5_percent_of_jaxs_one_program():
    """bd81221: a training step hands the op its cotangent as an array (the layer above's gradient), as JAX's
    two programs take it. So given, the Torch op is 0.97x JAX's one program at Mixtral's experts and 1.047x at
    OLMoE's, waited for (the benchmark's eager float32 sum and its broadcast cotangent made OLMoE's 1.12x), and
    within 1.03x of JAX's own two programs waited (1.007x, 1.024x) and 1.05x issued back to back (1.032x, 1.015x);
    the gradients are JAX's."""
    bridge, side = _bridge_pair("bd81221")
    one = {r["case"]: r for r in side["records"] if r["impl"] == "jax" and r["pass"] == "fwd+bwd"}
    two = {r["case"]: r for r in side["records"] if r["impl"].startswith("jax (fwd, then bwd")}
    given = {r["case"]: r for r in bridge["records"] if r["impl"] == "tokamax (torch, cotangent given)"}
    gmm = [c for c, r in given.items() if r["op"] == "grouped_matmul"]
    assert len(gmm) == 2
    for case in gmm:
        r = given[case]
        assert r["numerics"] == "passed" and r["grad_norms"] == pytest.approx(one[case]["grad_norms"], rel=1e-6)
        assert r["median_s"] <= 1.05 * one[case]["median_s"], case
        assert r["median_s"] <= 1.03 * two[case]["median_s"] and r["pipelined_s"] <= 1.05 * two[case]["pipelined_s"]


@pytest.mark.kernels_ci
def test_splash_from_torch_with_its_cotangent_given_costs_what_jaxs_own_split_costs_within_5_percent():
    """bd81221, splash at 8k tokens: JAX's forward and backward as two programs (the forward's residuals passed)
    are 1.06x its one program; the Torch op with its cotangent given is 1.044x that split waited and 1.017x issued
    back to back. Over the one program it is 1.107x: issue 71's 1.05x is not met there, and what is left is the
    split autograd makes, which JAX pays as well."""
    bridge, side = _bridge_pair("bd81221")
    (two,) = [r for r in side["records"] if r["op"] == "attention" and r["impl"].startswith("jax (fwd, then bwd")]
    (given,) = [r for r in bridge["records"]
                if r["op"] == "attention" and r["impl"] == "tokamax (torch, cotangent given)"]
    assert two["backward_takes"] == "the forward's residuals" and given["numerics"] == "passed"
    assert given["median_s"] <= 1.05 * two["median_s"] and given["pipelined_s"] <= 1.03 * two["pipelined_s"]


@pytest.mark.kernels_ci
def test_the_lm_heads_loss_from_torch_is_within_5_percent_of_jax_differentiating_a_mean_loss():
    """bd81221: training's loss is a mean, so JAX's `jax.grad` of the head's loss over the rows also scales dW by a
    cotangent other than 1 and rounds it once (155.6 ms against 151.0 for the sum, whose cotangent it folds away).
    Against that path, the one a training step takes, the Torch op is 1.029x waited and 1.021x back to back."""
    bridge, side = _bridge_pair("bd81221")
    (scaled,) = [r for r in side["records"] if r["op"] == "lm_head_loss" and "under jax.grad" in r["impl"]]
    (ours,) = [r for r in bridge["records"] if r["op"] == "lm_head_loss" and r["impl"] == "tokamax (torch)"]
    (plain,) = [r for r in side["records"] if r["op"] == "lm_head_loss" and r["impl"] == "jax"]
    assert scaled["grad_norms"] == pytest.approx(plain["grad_norms"], rel=1e-6)  # the sum's gradients, scaled back
    assert ours["median_s"] <= 1.05 * scaled["median_s"] and ours["pipelined_s"] <= 1.05 * scaled["pipelined_s"]


@pytest.mark.kernels_ci
def test_a_decode_steps_attention_and_grpos_rollouts_are_faster_with_the_kernel_once_nothing_is_read_back():
    """121ba88 on the v5e: a decode step's attention call (the kernel and the cache's padding, its bookkeeping in the
    op's program) is faster than transformers' eager and sdpa attention at every fill, and agrees with eager's;
    GRPO's rollouts with transformers' flash masks (a device read per token) were slower than eager attention,
    without that read faster, and GRPO's step faster than TRL alone."""
    (calls,) = _load("decode")
    by = {(r["fill"], r["impl"]): r for r in calls["records"]}
    for fill in {f for f, _ in by}:
        ours = by[fill, "tokamax"]
        assert ours["numerics"] == "passed" and ours["max_abs_error"] <= ours["bound"], ours
        for other in ("eager", "sdpa"):
            assert ours["median_s"] < by[fill, other]["median_s"], (fill, other)
            assert ours["pipelined_s"] < by[fill, other]["pipelined_s"], (fill, other)

    def median(name: str, case: str, impl: str) -> float:
        (data,) = [d for d in table.runs("trl") if d["file"].endswith(f"-121ba88-{name}.json")]
        (record,) = [r for r in data["records"] if r["case"] == case and r["impl"] == impl]
        return record["median_s"]

    eager = median("generate", "generate", "trl")
    assert median("generate", "generate", "tokamax") > eager > median("generate-no-read", "generate", "tokamax")
    assert median("grpo-no-read", "grpo", "tokamax") < median("grpo-no-read", "grpo", "trl")


@pytest.mark.kernels_ci
def test_the_packages_own_cache_masks_keep_grpos_rollouts_and_step_faster_on_the_chip():
    """235962c on the v5e, with the package's own `cache_masks.adopt` (121ba88's no-read runs had the tool register
    the same mask function): GRPO's rollouts and its whole step faster with the kernel than with eager attention and
    TRL alone, by at least 5%; a static cache's compiled decode steps ran as graphs with no break."""
    (data,) = [d for d in table.runs("trl") if d["file"].endswith("-235962c-generate-grpo.json")]
    by = {(r["case"], r["impl"]): r for r in data["records"]}
    for case in ("generate", "grpo"):
        assert by[case, "tokamax"]["median_s"] * 1.05 < by[case, "trl"]["median_s"], case
    static = by["generate-static", "tokamax"]["dynamo"]
    assert static["unique_graphs"] > 0 and static["graph_breaks"] == 0, static


@pytest.mark.kernels_ci
def test_a_static_caches_rollouts_compile_once_and_beat_eager_attention():
    """GRPO's rollouts on a static cache (a 2-layer Qwen3, 64 new tokens for 4 sequences). cea233d: transformers'
    compiled decode step took the kernel's padding mask, a column longer each token, so dynamo compiled 8 graphs
    (its limit) and the rest of the steps ran op by op, 2.6x eager attention's time (the trace: 9,960 device
    programs against eager's 3,177, 840 separate `linear`s). d7264a3 pads a static cache's mask to the cache's
    length: one graph, as eager attention's, and the kernel's rollouts are the faster ones (1.27x)."""
    def run(commit: str) -> dict:
        (data,) = [d for d in table.runs("trl") if f"-{commit}-generate-static" in d["file"]]
        return {r["impl"]: r for r in data["records"] if r["case"] == "generate-static"}

    before, after = run("cea233d"), run("d7264a3")
    assert before["tokamax"]["dynamo"]["unique_graphs"] == 8 and before["trl"]["dynamo"]["unique_graphs"] == 1
    assert before["tokamax"]["median_s"] > 2 * before["trl"]["median_s"]
    assert after["tokamax"]["dynamo"] == after["trl"]["dynamo"] == {"graph_breaks": 0, "unique_graphs": 1,
                                                                     "break_reasons": []}
    assert after["tokamax"]["median_s"] * 1.2 < after["trl"]["median_s"]
    assert after["tokamax"]["first_step_s"] < before["tokamax"]["first_step_s"] / 2


@pytest.mark.kernels_ci
def test_splash_from_torch_with_its_cotangent_given_is_within_5_percent_of_jaxs_one_program_back_to_back():
    """Splash at 8k tokens, the Torch op with its cotangent given, against JAX's one program (cea233d's JAX side;
    d7264a3 changed JAX's program only in how dq's three partials are added, which the compiler's model on this
    host costs the same). The chip's trace at cea233d put the Torch op's device time 0.76 ms over JAX's: dq's
    float32 sum written and rounded in a second pass (0.80 against 0.41 ms), the cotangent read for di (0.18
    against 0.05) and the max logits (0.18, which cea233d stopped computing). With dq's partials added element by
    element (d7264a3), 1.034x issued back to back (was 1.065x at cea233d, 1.076x at bd81221) and 1.069x waited
    (1.112x, 1.107x)."""
    def given(commit: str) -> dict:
        data = next(b for b in _load("bridge") if b["commit"] == commit)
        (r,) = [r for r in data["records"]
                if r["op"] == "attention" and r["impl"] == "tokamax (torch, cotangent given)"]
        return r

    before, after = given("cea233d"), given("d7264a3")
    assert after["numerics"] == "passed" and after["grad_norms"] == pytest.approx(before["grad_norms"], rel=1e-3)
    assert after["pipelined_ratio_to_jax"] <= 1.05 and after["ratio_to_jax"] <= 1.08, after
    assert after["median_s"] < before["median_s"] - 3e-4 and after["pipelined_s"] < before["pipelined_s"] - 3e-4
    (trace,) = [d for d in _load("traces") if d["commit"] == "cea233d"]
    ops = {r["case"]: dict(r["device"]["XLA Ops"]["top"]) for r in trace["records"]}
    backward = ops["causal-32-8-heads-of-128-8-192-tokens-tokamax-torch-cotangent-given-fwd-bwd"]
    dq_sum = [us for name, us in backward.items() if name.startswith(("%convert_reduce_fusion = f32[32,8192,128]",
                                                                       "%convert_bitcast_fusion = bf16[1,32,8192"))]
    assert len(dq_sum) == 2 and sum(dq_sum) > 700, backward  # the two passes d7264a3 makes one


@pytest.mark.kernels_ci
def test_at_8k_tokens_and_at_gemma_3s_two_layers_only_the_kernels_step_fits_and_where_both_fit_it_is_1_3x_faster():
    """2562004 (libtpu 0.0.52): Llama 3 8B at 8,192 tokens, 1 layer, forward, backward and AdamW, runs with the kernel
    (419 ms, 63% MFU) and not with torch-tpu's SDPA (out of HBM); cut to 4,096 tokens, both run, and the kernel's step
    is 1.54x faster. Gemma 3 4B at 2 layers of 4,096 tokens runs with the kernel only."""
    def run(part: str) -> dict:
        (data,) = [d for d in table.runs("steps") if d["file"].endswith(f"-2562004-{part}.json")]
        assert data["stack"]["libtpu"] == "0.0.52"
        return {(r["case"], r["impl"]): r for r in data["records"]}

    llama, gemma = run("llama3-8k"), run("gemma3-2l")
    assert llama[("llama3_8b/8192", "tokamax")]["median_s"] is not None
    assert llama[("llama3_8b/8192", "torch-sdpa")]["out_of_hbm"] is True
    ours, sdpa = llama[("llama3_8b/4096", "tokamax")], llama[("llama3_8b/4096", "torch-sdpa")]
    assert ours["loss_first"] == pytest.approx(sdpa["loss_first"], rel=1e-3)  # the same model and batch
    assert sdpa["median_s"] >= 1.3 * ours["median_s"]
    assert gemma[("gemma3_4b/4096", "tokamax")]["layers"] == gemma[("gemma3_4b/4096", "torch-sdpa")]["layers"] == 2
    assert gemma[("gemma3_4b/4096", "tokamax")]["median_s"] is not None
    assert gemma[("gemma3_4b/4096", "torch-sdpa")]["out_of_hbm"] is True


@pytest.mark.kernels_ci
def test_with_their_cotangents_given_olmoe_and_splash_from_torch_are_within_5_percent_back_to_back():
    """2562004, both sides in one command on libtpu 0.0.52: issued back to back, as a training loop issues them, the
    Torch op with its cotangent given is 1.049x JAX's one program at OLMoE's experts and 1.038x at splash's 8k shape;
    waited for after each call OLMoE's is 1.029x and splash's 1.088x (the host mode's split of the same calls: the
    Torch forward's launch 0.40 ms, the wait 1.1 ms past the forward's device time, in torch-tpu's runtime)."""
    bridge, side = _bridge_pair("2562004")
    one = {r["case"]: r for r in side["records"] if r["impl"] == "jax" and r["pass"] == "fwd+bwd"}
    given = {r["op"]: r for r in bridge["records"] if r["impl"] == "tokamax (torch, cotangent given)"}
    assert set(given) == {"grouped_matmul", "attention"}
    for r in given.values():
        assert r["numerics"] == "passed" and r["grad_norms"] == pytest.approx(one[r["case"]]["grad_norms"], rel=1e-3)
        assert r["pipelined_s"] <= 1.05 * one[r["case"]]["pipelined_s"], r["case"]
    assert given["grouped_matmul"]["median_s"] <= 1.05 * one[given["grouped_matmul"]["case"]]["median_s"]


@pytest.mark.kernels_ci
def test_a_static_caches_rollouts_after_the_queries_q_len_floor_still_compile_once_and_beat_eager_attention():
    """2562004 (c261012's floor on where the cache op places the queries): one graph on each side, the kernel's
    rollouts 0.475 s against eager attention's 0.587 s, as d7264a3's (0.468, 0.594)."""
    (data,) = [d for d in table.runs("trl") if "-2562004-generate-static" in d["file"]]
    by = {r["impl"]: r for r in data["records"] if r["case"] == "generate-static"}
    assert by["tokamax"]["dynamo"] == by["trl"]["dynamo"] == {"graph_breaks": 0, "unique_graphs": 1,
                                                               "break_reasons": []}
    assert by["tokamax"]["median_s"] * 1.2 < by["trl"]["median_s"]
