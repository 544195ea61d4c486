"""The grouped matmul's tiles the v5e measured (`tokamax.moe.measured`: torch-ext/tokamax/moe/measured/v5e.json,
v5e-gpt-oss-20b.json and v5e-olmoe.json, made on the chip by `python3 -m tools.chip tune`, i.e.
`tokamax.tuning.tune_functions`; the second with tiles that divide gpt-oss-20b's dimensions, `--only gpt-oss-20b`,
the third with the weights' lookahead and deeper input buffering, `--only OLMoE`): shipped whole, read by
default on that chip before the rule, through upstream's public op, and what the benchmark with them measured."""

from __future__ import annotations

import importlib
import json
import warnings

import jax
import jax.numpy as jnp
import pytest

from tests.conftest import REPO
from tools.chip.models import EXPERTS, IMBALANCED

MEASURED = REPO / "benchmarks/measured"
KERNELS = ("gmm", "dlhs", "tgmm")


@pytest.fixture(scope="module")
def measured(kernel):
    return kernel.moe.measured


def _key(measured, name, s):  # noqa: ANN001, ANN202
    return measured.Key(name, s.rows, s.hidden, s.out, s.experts, 2)


@pytest.mark.kernels_ci
def test_the_shipped_file_holds_every_benchmark_call_with_tiles_that_fit(kernel, measured, v5e):
    tables = measured.tables()
    assert set(tables) == {"TPU v5 lite"}, set(tables)
    table = tables["TPU v5 lite"]
    assert set(table) == {_key(measured, name, s) for s in EXPERTS for name in KERNELS}
    tiles = kernel.moe.tiles
    for key, found in table.items():
        t = tiles.Tiles(*found.tiles)
        assert tiles.fits(key.kernel, t, v5e) and tiles._legal(t, key.m, key.k, key.n), (key, t)
        # gpt-oss-20b tuned again with tiles that divide its dimensions, OLMoE with the weights' lookahead and
        # deeper input buffering (`tools.chip tune --only`), the faster entry kept
        later = {"v5e-gpt-oss-20b.json": 2880, "v5e-olmoe.json": 2048}
        again = later.get(found.source) == key.k and (found.source != "v5e-olmoe.json" or key.groups == 64)
        assert 0 < found.seconds < 0.1 and (found.source == "v5e.json" or again), (key, found)
        assert tiles.fits(key.kernel, t, v5e, buffers=found.buffers), (key, found)


@pytest.mark.kernels_ci
def test_the_file_is_read_by_default_on_the_v5e_only(kernel, emulation, measured):
    tiles = kernel.moe.tiles
    s = next(e for e in EXPERTS if e.model == "gpt-oss-20b")
    for name in KERNELS:
        want = measured.lookup("TPU v5 lite", _key(measured, name, s)).tiles
        with emulation.emulated_chip("v5e"):
            assert tuple(tiles.for_call(name, s.rows, s.hidden, s.out, s.experts, 2)) == want, name
        with emulation.emulated_chip("v6e"):  # no file for the v6e: the rule
            on = kernel.roofline.chip()
            got = tiles.for_call(name, s.rows, s.hidden, s.out, s.experts, 2)
            assert got == tiles.choose(name, s.rows, s.hidden, s.out, s.experts, on, 2), name
    with emulation.emulated_chip("v5e"):  # another shape on the v5e: the rule
        on = kernel.roofline.chip()
        assert tiles.for_call("gmm", 12288, 3072, 6144, 16, 2) == tiles.choose("gmm", 12288, 3072, 6144, 16, on, 2)


@pytest.mark.kernels_ci
def test_upstreams_public_op_and_its_backward_take_the_measured_tiles(kernel, emulation, measured):
    """`ops.ragged_dot` under value-and-grad at DeepSeek-V3's one-chip shape on the v5e: the Config each of its
    three kernel calls receives (the bound arguments upstream's Op asks a config for, recorded while tracing)."""
    tune = importlib.import_module(f"{kernel.tuning.__name__}.tune")
    s = next(e for e in EXPERTS if e.model.startswith("DeepSeek-V3"))
    args = (jax.ShapeDtypeStruct((s.rows, s.hidden), jnp.bfloat16),
            jax.ShapeDtypeStruct((s.experts, s.hidden, s.out), jnp.bfloat16),
            jax.ShapeDtypeStruct((s.experts,), jnp.int32))

    def step(a, b, g):  # noqa: ANN001, ANN202
        return jax.value_and_grad(lambda a, b: kernel.ops.ragged_dot(a, b, g).astype(jnp.float32).sum(), (0, 1))(a, b)

    call = tune.FunctionCall("step", step, args)
    with tune._chip_context("v5e", interpret=False):
        with tune._RECORDER.recording(tune._op_lib().BoundArguments) as seen:
            jax.jit(step).trace(*args)
        configs = {measured.key_of(ba).kernel: ba.default_config for ba in list(seen) if measured.key_of(ba)}
    got = {name: (c.tile_m, c.tile_k, c.tile_n) for name, c in configs.items()}
    assert call.op == "step" and set(got) == set(KERNELS), got
    for name in KERNELS:
        assert got[name] == measured.lookup("TPU v5 lite", _key(measured, name, s)).tiles, name


@pytest.mark.kernels_ci
def test_a_file_this_build_cannot_read_is_set_aside_and_said(kernel, measured, tmp_path, monkeypatch):
    (tmp_path / "v5e.json").write_text('{"device_kind": "TPU v5 lite", "data": [["not bound arguments"]]}')
    (tmp_path / "other.json").write_text("not JSON")
    monkeypatch.setattr(measured, "FILES", tmp_path)
    measured.forget()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert measured.tables() == {"TPU v5 lite": {}}
        said = [str(w.message) for w in caught]
        for name in ("v5e.json", "other.json"):
            assert any(f"{name} cannot be read" in m and "tile rule" in m for m in said), (name, said)
    finally:
        monkeypatch.undo()
        measured.forget()


@pytest.mark.kernels_ci
def test_with_the_measured_tiles_the_v5e_ran_every_shape_at_least_as_fast_as_with_the_rule():
    """The benchmark with the rule's tiles (commit 9410969) and with the measured ones (8b33815), on the v5e: no
    shape and pass slower by more than the runs' spread (3%)."""
    def tokamax(path) -> dict:  # noqa: ANN001
        return {(r["case"], r["pass"]): r["median_s"] for r in json.loads(path.read_text())["records"]
                if r["op"] == "grouped_matmul" and r["impl"] == "tokamax" and r["median_s"]}
    rule = tokamax(next(MEASURED.glob("v5e-*-bench-moe-9410969.json")))
    chosen = tokamax(next(MEASURED.glob("v5e-*-bench-moe-8b33815.json")))
    assert set(rule) == set(chosen) == {(f"{s.model}: {s.rows} x {s.hidden} -> {s.out}, {s.experts} experts", p)
                                        for s in EXPERTS for p in ("fwd", "fwd+bwd")}
    slower = {k: round(chosen[k] / rule[k], 3) for k in chosen if chosen[k] > 1.03 * rule[k]}
    assert not slower, slower


@pytest.mark.kernels_ci
def test_where_two_files_hold_a_call_the_faster_entry_answers(kernel, measured, tmp_path, monkeypatch):
    """A later tune of some shapes (`tools.chip tune --only`, with more candidates) ships beside the first file:
    each call takes the faster of the two entries, in either file order."""
    shipped = json.loads((measured.FILES / "v5e.json").read_text())
    call, timings = shipped["data"][0]
    config = json.loads(next(iter(timings)))
    faster = json.dumps(config | {"tile_m": 128, "tile_n": 256})
    slower = json.dumps(config | {"tile_m": 128, "tile_n": 128})
    entry = next(iter(timings.values()))
    for name, cfg, ms in (("a-faster.json", faster, 0.5), ("z-slower.json", slower, 1e3)):
        one = entry | {"evaluation_times_ms": [ms] * len(entry["evaluation_times_ms"])}
        (tmp_path / name).write_text(json.dumps(shipped | {"data": [[call, {cfg: one}]]}))
    (tmp_path / "v5e.json").write_text(json.dumps(shipped))
    monkeypatch.setattr(measured, "FILES", tmp_path)
    measured.forget()
    try:
        found = measured.table("TPU v5 lite")
        s = EXPERTS[0]  # the shipped file's first call: Mixtral's forward
        m = found[_key(measured, "gmm", s)]
        assert m.tiles == (128, config["tile_k"], 256) and m.source == "a-faster.json", m
        assert len(found) == len(measured.read(measured.FILES / "v5e.json")[1])
    finally:
        monkeypatch.undo()
        measured.forget()


@pytest.mark.kernels_ci
def test_a_measured_entrys_input_buffering_reaches_the_ops_config(kernel, emulation, measured, tmp_path, monkeypatch):
    """An entry timed fastest at three input buffers (`tuning.tune` times the first tiles at `DEEPER_BUFFERS` too):
    `lookup` gives its count and upstream's Op runs the tiles with it; a call the file does not hold keeps upstream's
    default buffering."""
    shipped = json.loads((measured.FILES / "v5e.json").read_text())
    call, timings = shipped["data"][0]  # Mixtral's forward
    config = json.loads(next(iter(timings)))
    deeper = json.dumps(config | {"tile_m": 128, "tile_k": 1024, "tile_n": 512, "input_buffer_count": 3})
    entry = next(iter(timings.values()))
    one = entry | {"evaluation_times_ms": [0.5] * len(entry["evaluation_times_ms"])}
    (tmp_path / "v5e.json").write_text(json.dumps(shipped | {"data": [[call, {deeper: one}]]}))
    monkeypatch.setattr(measured, "FILES", tmp_path)
    measured.forget()
    try:
        s = EXPERTS[0]
        found = measured.lookup("TPU v5 lite", _key(measured, "gmm", s))
        assert (found.tiles, found.buffers) == ((128, 1024, 512), 3), found
        specs = dict(lhs=jax.ShapeDtypeStruct((s.rows, s.hidden), jnp.bfloat16),
                     rhs=jax.ShapeDtypeStruct((s.experts, s.hidden, s.out), jnp.bfloat16),
                     group_sizes=jax.ShapeDtypeStruct((s.experts,), jnp.int32))
        with kernel.ops.config.cross_compile(True), emulation.emulated_chip("v5e"), \
                jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v5e")):
            c = kernel.ops.tpu.RaggedDot().bind(**specs).default_config
            other = kernel.ops.tpu.RaggedDot().bind(**(specs | dict(
                lhs=jax.ShapeDtypeStruct((12288, 3072), jnp.bfloat16),
                rhs=jax.ShapeDtypeStruct((16, 3072, 6144), jnp.bfloat16),
                group_sizes=jax.ShapeDtypeStruct((16,), jnp.int32)))).default_config
        assert (c.tile_m, c.tile_k, c.tile_n, c.input_buffer_count) == (128, 1024, 512, 3), c
        assert other.input_buffer_count == measured.BUFFERS, other
    finally:
        monkeypatch.undo()
        measured.forget()


@pytest.mark.kernels_ci
def test_the_newest_benchmark_runs_every_shape_and_pass_at_least_1_2x_faster_than_xla():
    """Issue 51's bar, on the v5e in one run: `ops.ragged_dot` (its measured tiles, the weights fetched with
    lookahead) against `jax.lax.ragged_dot`, forward and forward + backward at the five expert shapes; and the
    lookahead never slower than upstream's one-step-ahead fetch beyond the runs' spread (3%)."""
    newest = max(MEASURED.glob("v5e-*-bench-moe-*.json"), key=lambda p: json.loads(p.read_text())["started"])
    times: dict[str, dict] = {}
    for r in json.loads(newest.read_text())["records"]:
        if r["op"] == "grouped_matmul" and r["median_s"]:
            times.setdefault(r["impl"], {})[(r["case"], r["pass"])] = r["median_s"]
    ours, xla, ahead = times["tokamax"], times["xla"], times["tokamax (weights one step ahead)"]
    assert len(ours) == 2 * len(EXPERTS) and set(ours) == set(xla) == set(ahead), newest.name
    slow = {k: round(xla[k] / ours[k], 3) for k in ours if xla[k] < 1.2 * ours[k]}
    assert not slow, f"{newest.name}: under 1.2x XLA's speed: {slow}"
    slower = {k: round(ours[k] / ahead[k], 3) for k in ours if ours[k] > 1.03 * ahead[k]}
    assert not slower, slower


@pytest.mark.kernels_ci
def test_the_newest_uneven_benchmark_runs_at_least_1_2x_faster_than_xla():
    """Issue 62's bar, on the v5e in one run: `ops.ragged_dot` (the rule's tiles, the scoped VMEM raised where they
    need it) against `jax.lax.ragged_dot` at both 128-expert shapes with uneven routing, forward and forward +
    backward."""
    newest = max(MEASURED.glob("v5e-*-bench-moe_uneven-*.json"), key=lambda p: json.loads(p.read_text())["started"])
    times: dict[str, dict] = {}
    for r in json.loads(newest.read_text())["records"]:
        if r["op"] == "grouped_matmul" and r["median_s"]:
            times.setdefault(r["impl"], {})[(r["case"], r["pass"])] = r["median_s"]
    ours, xla = times["tokamax"], times["xla"]
    assert len(ours) == 2 * len(IMBALANCED) and set(ours) == set(xla), newest.name
    slow = {k: round(xla[k] / ours[k], 3) for k in ours if xla[k] < 1.2 * ours[k]}
    assert not slow, f"{newest.name}: under 1.2x XLA's speed: {slow}"


TILE_RULE = "3733e2d"
"""The commit of the tile rule's last change (tgmm's ties to 128-row tiles; 6ad4d47 after it changed a docstring)."""
PREDATES = {"84d05f3": {("tgmm", "Qwen3-235B-A22B"), ("tgmm", "gpt-oss-120b")}}
"""Per ranked sweep (by its commit), the (kernel, model) whose rule's choice then is not the rule's now: made before
`TILE_RULE`, its tgmm choice was 256-row tiles where the rule now takes 128 (3733e2d measured both)."""


@pytest.mark.kernels_ci
def test_each_uneven_records_choice_is_what_the_rule_takes_now(kernel, emulation):
    """The uneven records' tiles are the rule's at their commit: a ranked sweep lists the rule's choice first per
    kernel and shape (`tools.chip.sweep._ranked`), held equal to `tiles.choose` now on the v5e but where `PREDATES`
    names the record (which must still differ, else the entry goes); the uneven bench names no tiles, so the newest
    (whose ratios `test_the_newest_uneven_benchmark_runs_at_least_1_2x_faster_than_xla` reads) must be the rule's
    own: run at `TILE_RULE` or later (a bench of another commit is named here)."""
    tiles, differ, checked = kernel.moe.tiles, {}, 0
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
        for path in sorted(MEASURED.glob("v5e-*-sweep-ranked-uneven-*.json")):
            data = json.loads(path.read_text())
            first: dict = {}
            for r in data["records"]:
                first.setdefault((r["op"], r["case"]), r["impl"].split(" ")[0])
            for s in IMBALANCED:
                case = f"{s.model}: {s.rows} x {s.hidden} -> {s.out}, {s.experts} experts"
                for name in KERNELS:
                    t = tiles.choose(name, s.rows, s.hidden, s.out, s.experts, on, 2)
                    now = "x".join(map(str, (t.tm, t.tn, t.tk) if name == "dlhs" else tuple(t)))
                    if first[name, case] != now:
                        differ.setdefault(data["commit"][:7], set()).add((name, s.model.split(",")[0]))
                    checked += 1
    assert checked == 6, checked
    assert differ == PREDATES, differ
    newest = max(MEASURED.glob("v5e-*-bench-moe_uneven-*.json"), key=lambda p: json.loads(p.read_text())["started"])
    assert json.loads(newest.read_text())["commit"][:7] in (TILE_RULE, "6ad4d47"), newest.name
