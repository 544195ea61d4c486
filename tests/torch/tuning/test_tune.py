"""`tokamax.tuning.tune` as a transformers user calls it: one call over a tiny Qwen3-MoE's training step
(tokamax attention, experts and the fused loss), on this CPU host for v6e in Pallas interpret mode
(the timings mean nothing here; the machinery runs: 2 candidates an op, to keep it short). The file
it writes holds entries for the attention, the experts and the loss, and lists what it skipped with
the reason; applied with `tuning.use`, each recorded op's JAX function picks the file's config for
its call, and lowers for TPU to another module exactly where that config is not the heuristic's; a
call the file does not name keeps its config; a file for another chip is refused, naming both; a
recording saved and loaded again tunes the same calls."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import jax
import pytest
import torch

from tests.torch.transformers.models import pair, tokens

CANDIDATES = 2


@pytest.fixture(scope="module")
def tuned(tokamax, tmp_path_factory) -> dict:  # noqa: ANN001
    """(model, recording, tuning result, file) of one tune() over the step."""
    _, model = pair("qwen3_moe", tokamax, train=True)
    tokamax.use_fused_loss(model)
    ids = tokens(2, 64, seed=3)  # 128 tokens, 256 expert rows: every kernel at its lanes

    def step() -> None:
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()

    path = tmp_path_factory.mktemp("tuning") / "qwen3-moe-v6e.json"
    with pytest.MonkeyPatch.context() as patch:
        # upstream's loss kernel, which has tuning candidates: at these 128 rows (a prefill's) the package's own
        # choice is one chunk of XLA's formulation (`lm_head.fused.ONE_CHUNK`), which has none
        patch.setattr(tokamax.torch_ops, "loss_chunk", lambda *args, **kwargs: 0)
        recording = tokamax.tuning.record(step)
    result = tokamax.tuning.tune_recording(recording, out=path, chip="v6e", max_configs=CANDIDATES,
                                           progress_bar=False)
    return {"recording": recording, "tuned": result, "path": path}


def test_the_file_has_the_attention_experts_and_loss_and_says_what_it_skipped(tokamax, tuned):
    result, path = tuned["tuned"], tuned["path"]
    raw = json.loads(path.read_text())
    assert raw["device_kind"] == "TPU v6 lite" and raw["tokamax_version"] == "0.0.17"
    ops = {entry[0]["op"]["__type"].rsplit(".", 1)[-1] for entry in raw["data"]}
    assert {"PallasMosaicTpuSplashAttention", "PallasMosaicTpuRaggedDot",
            "PallasMosaicTpuLinearSoftmaxCrossEntropyLoss"} <= ops, ops
    assert {"splash_attention", "gmm", "linear_softmax_cross_entropy_rows"} <= result.entries.keys()
    for entry in raw["data"]:  # each entry timed its candidates (the heuristic's among them)
        assert 1 <= len(entry[1]) <= CANDIDATES
    recorded = [c.op for c in tuned["recording"].calls]
    assert len(recorded) == len(set(c.key for c in tuned["recording"].calls))  # a signature seen twice, once
    assert {"splash_attention", "splash_attention_bwd", "gmm", "gmm_bwd"} <= set(recorded)
    for skipped in result.skipped:
        assert skipped.op in recorded and skipped.reason
    assert tokamax.tuning.load(path).device_kind == "TPU v6 lite"  # it reads back whole


def _config_and_module(tokamax, call, token: str) -> tuple[list, str]:  # noqa: ANN001
    """The configs `call`'s JAX function picks (each Op's default_config) and its TPU lowering, with `token`."""
    tune = importlib.import_module(f"{tokamax.__name__}.tuning.tune")
    op_lib = tune._op_lib()
    chosen, prop = [], op_lib.BoundArguments.default_config

    def recorded(self):  # noqa: ANN001, ANN202
        chosen.append(prop.fget(self))
        return chosen[-1]

    args = (*call.args[:-1], token)
    statics = tuple(i for i, a in enumerate(args) if not hasattr(a, "shape") and a is not None)
    op_lib.BoundArguments.default_config = property(recorded)
    try:
        with tune._chip_context("v6e", interpret=False):
            module = jax.jit(lambda *a: call.jax_fn(*a), static_argnums=statics).trace(*args).lower(
                lowering_platforms=("tpu",)).as_text()
    finally:
        op_lib.BoundArguments.default_config = prop
    return chosen, module


def _decided(path: Path, out: Path, first: bool) -> Path:
    """The file with each entry's timings rewritten so that the first (or last) of its configs in the
    order of their JSON text is the fastest: on this host the timings are interpret mode's, so which
    candidate wins is chance; the rewritten file says which, the same in every run."""
    raw = json.loads(path.read_text())
    for _, configs in raw["data"]:
        ranked = sorted(configs)
        winner = ranked[0] if first else ranked[-1]
        for key, data in configs.items():
            data["evaluation_times_ms"] = [1.0 if key == winner else 2.0] * len(data["evaluation_times_ms"])
    out.write_text(json.dumps(raw))
    return out


def test_applied_it_steers_each_op_where_the_file_says(tokamax, tuned, tmp_path):
    """Two files of the same entries, each naming another winner per entry: under each, every recorded call
    picks the file's winner where the file names its key and upstream's own choice (table or heuristic)
    elsewhere, and lowers to another module where that changes its config; between them, every
    tuned op is steered away from its own choice by one of the files."""
    tune = importlib.import_module(f"{tokamax.__name__}.tuning.tune")
    away: dict[str, bool] = {}
    for first in (True, False):
        path = _decided(tuned["path"], tmp_path / f"decided-{first}.json", first)
        best = {(type(ba.op).__name__, ba.autotuning_cache_key): data.fastest_config
                for ba, data in tokamax.tuning.load(path).data}
        for call in tuned["recording"].calls:
            bound = tune.bound_arguments(call, "v6e")
            keys = [(type(ba.op).__name__, ba.autotuning_cache_key) for ba in bound]
            if not any(k in best for k in keys):
                continue
            outside, module_out = _config_and_module(tokamax, call, "")  # upstream's own: table or heuristic
            want = [best.get(k, o) for k, o in zip(keys, outside, strict=True)]
            with tokamax.tuning.use(path) as applied:  # (a use block steers JAX calls inside it too)
                inside, module_in = _config_and_module(tokamax, call, applied.token)
            assert inside == want, call.op
            steered = inside != outside
            # Steered, the lowering must change. Unsteered, it may still differ in the text: JAX shares trace
            # constants by identity, so what was lowered before can reorder a module's constants.
            assert module_in != module_out or not steered, f"{call.op}: configs changed, module did not"
            away[call.op] = away.get(call.op, False) or steered
    assert away and all(away.values()), away


def test_a_call_the_file_does_not_name_keeps_its_config(tokamax, tuned):
    """The step's gmm at another row count: the file has no entry for its key."""
    call = next(c for c in tuned["recording"].calls if c.op == "gmm")
    other = type(call)(call.op, call.jax_fn, (jax.ShapeDtypeStruct((384, call.args[0].shape[1]), call.args[0].dtype),
                                              *call.args[1:]))
    tune = importlib.import_module(f"{tokamax.__name__}.tuning.tune")
    (ba,) = [b for b in tune.bound_arguments(other, "v6e") if type(b.op).__name__ == "PallasMosaicTpuRaggedDot"]
    with tune._chip_context("v6e"):
        heuristic = ba.heuristics_config
    outside, _ = _config_and_module(tokamax, other, "")
    with tokamax.tuning.use(tuned["path"]) as applied:
        inside, _ = _config_and_module(tokamax, other, applied.token)
    assert inside == outside and heuristic in inside


def test_a_file_for_another_chip_is_refused_naming_both(tokamax, tuned, tmp_path):
    raw = json.loads(tuned["path"].read_text())
    raw["device_kind"] = "TPU v5 lite"
    path = tmp_path / "v5e.json"
    path.write_text(json.dumps(raw))
    call = next(c for c in tuned["recording"].calls if c.op == "splash_attention")
    tune = importlib.import_module(f"{tokamax.__name__}.tuning.tune")
    with tokamax.tuning.use(path) as applied:
        pass  # on a CPU host the block names no chip; the call's trace does
    with pytest.raises(tokamax.tuning.AutotuningFileError, match=r"v5e.json was tuned on 'TPU v5 lite' .* runs on "
                                                                 r"'TPU v6 lite'"):
        with tune._chip_context("v6e"):
            jax.jit(call.jax_fn, static_argnums=tuple(i for i, a in enumerate(call.args) if not hasattr(a, "shape")
                                                      and a is not None)).trace(*call.args[:-1], applied.token)


def test_a_saved_recording_tunes_the_same_calls(tokamax, tuned, tmp_path):
    recording = tuned["recording"]
    saved = recording.save(tmp_path / "calls.json")
    loaded = tokamax.tuning.Recording.load(saved)
    assert [c.key for c in loaded.calls] == [c.key for c in recording.calls]


def test_cpu_tensors_run_under_the_result_and_stay_right(tokamax, tuned):
    """The step under the file: the same loss as without it (a config changes tiles, not values)."""
    _, model = pair("qwen3_moe", tokamax, train=True)
    tokamax.use_fused_loss(model)
    ids = tokens(2, 64, seed=3)
    with torch.no_grad():
        plain = model(input_ids=ids, labels=ids).loss
        with tokamax.tuning.use(tuned["path"]):
            steered = model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(steered, plain, rtol=1e-5, atol=1e-5)


def test_on_a_host_where_torch_tpu_holds_the_chip_it_says_what_to_do(tokamax, ops, monkeypatch):
    bridge = importlib.import_module(f"{ops.__name__}._bridge")
    monkeypatch.setattr(torch.tpu, "get_device_name", lambda device=None: "TPU v6e")
    bridge.attached_chip.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"torch-tpu holds this host's TPU \(v6e\).*tokamax.tuning.record\(step\)"
                                               r"\.save\(path\), then run tokamax.tuning.tune_recording"):
            tokamax.tuning.tune_recording(tokamax.tuning.Recording([]))
    finally:
        monkeypatch.undo()
        bridge.attached_chip.cache_clear()


def test_recording_costs_a_dictionary_probe_per_call(tokamax, ops):
    """Recording sees the calls of every thread (continuous batching runs its forwards in its own) and keeps
    one per signature."""
    import threading

    x = torch.zeros(256, 128, device="meta")
    w = torch.zeros(4, 128, 128, device="meta")
    sizes = torch.zeros(4, dtype=torch.int32, device="meta")
    with importlib.import_module(f"{tokamax.__name__}.tuning.recorded").recording() as calls:
        ops.gmm(x, w, sizes)
        worker = threading.Thread(target=lambda: ops.gmm(torch.zeros(384, 128, device="meta"), w, sizes))
        worker.start()
        worker.join()
        ops.gmm(x, w, sizes)
    assert [(c.op, c.args[0].shape) for c in calls.values()] == [("gmm", (256, 128)), ("gmm", (384, 128))]
