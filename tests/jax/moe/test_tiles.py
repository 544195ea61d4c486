"""The grouped matmul's tiles before TPU7x (`tokamax.moe.tiles`), against what the v5e measured
(benchmarks/measured/v5e-*-sweep-*.json: 300 tilings of the three kernels at five model shapes, then gpt-oss-20b's
with each dimension whole, by tools/chip/sweep.py; -tiles-uneven- and -sweep-gpt-oss-120b-uneven-: two 128-expert
shapes at uneven routing, row tiles down to 128; the shipped tune files, torch-ext/tokamax/moe/measured/) and
through upstream's public op (the port's hook), on every chip."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import REPO
from tools.chip.models import EXPERTS, IMBALANCED

MEASURED = REPO / "benchmarks/measured"
TUNED = REPO / "torch-ext/tokamax/moe/measured"


def _started(path: Path) -> str:
    return json.loads(path.read_text())["started"]


SWEEP = sorted(MEASURED.glob("v5e-*-sweep-*.json"), key=_started)
# uneven routing: the first sweep (whose gpt-oss-120b gmm and dlhs ran out of HBM making their inputs), then
# gpt-oss-120b's again; in the order they ran, so that the later one's records replace the first's
UNEVEN = sorted({*MEASURED.glob("v5e-*-tiles-uneven-*.json"), *MEASURED.glob("v5e-*-sweep-*-uneven-*.json")},
                key=_started)
KERNELS = {((1,), (1,)): "gmm", ((1,), (2,)): "dlhs", ((0,), (0,)): "tgmm"}  # contracting dims of lhs, rhs
# The sweep's first two shapes were timed while later tilings still compiled on the host (tools/chip/run.py
# compiles everything first since): their times are not the kernel's, their compile outcomes are.
TIMED_CLEAN = ("Qwen3-30B-A3B", "gpt-oss-20b", "DeepSeek-V3, one chip's 8 experts")
SHAPES = {s.model: s for s in EXPERTS}


@pytest.fixture(scope="module")
def sweep(tiles, v5e) -> list[tuple[str, str, object, float | None]]:
    """(model, kernel, Tiles in upstream's Config naming, median seconds or None where it failed to compile): every
    sweep's records of a tiling at the VMEM limit the package compiles it with (`tiles.vmem_limit`: libtpu's default
    within it, the raised limit past it), a later sweep's where two timed the same tiling."""
    assert SWEEP, "no v5e sweep in benchmarks/measured"
    return _records(tiles, v5e, SWEEP)


def _records(tiles, on, paths, as_compiled: bool = True) -> list:  # noqa: ANN001
    """With `as_compiled`, only the records at the limit the package compiles each tiling with; else every record,
    with that limit: (model, kernel, tiles, seconds, limit in bytes or None)."""
    found = {}
    for path in paths:
        for r in json.loads(path.read_text())["records"]:
            shape, _, raised = r["impl"].partition(" (VMEM ")  # the wide sweeps: "256x4096x1536 (VMEM 64 MiB)"
            a, b, c = map(int, shape.split("x"))
            t = tiles.Tiles(a, c, b) if r["op"] == "dlhs" else tiles.Tiles(a, b, c)  # dlhs swept as (m, n, k)
            limit = int(raised.split()[0]) << 20 if raised else None
            if as_compiled and limit != tiles.vmem_limit(r["op"], t, on):
                continue  # compiled at another limit than the package gives it
            found[(r["case"].split(":")[0], r["op"], t, limit)] = r["median_s"]
    if as_compiled:
        return [(m, k, t, seconds) for (m, k, t, _), seconds in found.items()]
    return [(m, k, t, seconds, limit) for (m, k, t, limit), seconds in found.items()]


def _dims(spec: str) -> list[int]:
    return [int(d) for d in spec.split("[")[1].rstrip("]").split(",")]


def tuned_calls(path: Path, buffers: int = 2) -> list[tuple[str, tuple[int, int, int, int],
                                                         dict[tuple[int, int, int], float]]]:
    """(kernel, (m, k, n, groups) as `tiles` names them, median seconds by (tile_m, tile_k, tile_n)) for each call of
    a tune file (upstream's autotuner), the candidates timed at `buffers` input buffers (upstream's default: the
    rule's tiles run with it) and without tgmm's `combine_scopes` (which the tile hook does not pass on)."""
    out = []
    for call, candidates in json.loads(path.read_text())["data"]:
        a = call["arguments"]
        (lhs_c, rhs_c), _ = a["ragged_dot_dimension_numbers"]["dot_dimension_numbers"]
        kernel = KERNELS[(tuple(lhs_c), tuple(rhs_c))]
        (m, k), rhs = _dims(a["lhs"]), _dims(a["rhs"])
        n = rhs[2] if kernel == "gmm" else rhs[1]  # tgmm: rhs is the output's gradient [m, n]
        if kernel == "dlhs":  # the gradient [m, n] against the weights [g, k, n]
            k, n = rhs[1], rhs[2]
        times = {}
        for config, result in candidates.items():
            c = json.loads(config)
            ran = c.get("input_buffer_count", 2) == buffers and not c.get("combine_scopes")
            if result.get("evaluation_times_ms") and ran:
                times[(c["tile_m"], c["tile_k"], c["tile_n"])] = statistics.median(result["evaluation_times_ms"]) / 1e3
        out.append((kernel, (m, k, n, a["group_sizes"]["num_groups"]), times))
    return out


@pytest.mark.kernels_ci
def test_every_tiling_the_vmem_model_admits_compiled_on_the_v5e(tiles, v5e, sweep):
    """Each at the limit the package compiles it with: within libtpu's default scoped VMEM at the default, past it at
    the raised limit (the wide sweeps: every tiling they compiled there was within the model's raised bound, so that
    bound itself was not probed from above; the default's was: tilings past it failed at it)."""
    admitted = [(m, k, t, s) for m, k, t, s in sweep if tiles.fits(k, t, v5e)]
    failed = [(m, k, t) for m, k, t, s in admitted if s is None]
    assert len(admitted) > 100 and not failed, f"admitted by the model, refused by the v5e's compiler: {failed}"
    raised = [t for m, k, t, s in sweep if tiles.vmem_limit(k, t, v5e) is not None]
    assert len(raised) > 100, f"{len(raised)} tilings timed at the raised limit"
    past_default = [s for m, k, t, s, limit in _records(tiles, v5e, SWEEP, as_compiled=False)
                    if limit is None and tiles.vmem_bytes(k, t) > v5e.scoped_vmem]
    assert None in past_default, "the sweep reached no tiling past the default VMEM limit: no bound was tried"


@pytest.mark.kernels_ci
@pytest.mark.parametrize("model", TIMED_CLEAN)
@pytest.mark.parametrize("kernel_name", ["gmm", "dlhs", "tgmm"])
def test_the_rule_is_within_15_percent_of_the_fastest_tiling_measured(tiles, v5e, sweep, model, kernel_name):
    """Against the sweep's times; rows of 128, which the sweep did not time at these shapes, against each tune file
    that timed the rule's tiles (in that file's harness: the autotuner's times are compared only with each other)."""
    s = SHAPES[model]
    chosen = tiles.choose(kernel_name, s.rows, s.hidden, s.out, s.experts, v5e)
    times = {t: sec for m, k, t, sec in sweep if m == model and k == kernel_name and sec is not None}
    if chosen not in times and chosen.tm < min(t.tm for t in times):
        call = (kernel_name, (s.rows, s.hidden, s.out, s.experts))
        runs = [by for path in sorted(TUNED.glob("*.json")) for name, shape, by in tuned_calls(path)
                if (name, shape) == call and tuple(chosen) in by]
        assert runs, f"{model} {kernel_name}: the rule's {chosen} was not measured"
        for by in runs:
            best = min(by.values())
            assert by[tuple(chosen)] <= 1.15 * best, (model, kernel_name, chosen, by[tuple(chosen)], best)
        return
    assert chosen in times, f"{model} {kernel_name}: the rule's {chosen} was not measured"
    best = min(times.values())
    assert times[chosen] <= 1.15 * best, f"{model} {kernel_name}: {chosen} {times[chosen] * 1e3:.2f} ms, " \
                                          f"best {min(times, key=times.get)} {best * 1e3:.2f} ms"


UNEVEN_BOUND = {"gmm": 1.05, "dlhs": 1.05, "tgmm": 1.10}
"""How far over the fastest tiling the v5e timed within the VMEM model the rule's may run at uneven routing: tgmm's
model misses a cost of many groups (`tiles.seconds`), and its tiles ran 5.5% (gpt-oss-120b) and 6.0% (Qwen3-235B-A22B)
over the fastest there."""


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("model", "kernel_name"), [(s.model, k) for s in IMBALANCED for k in ("gmm", "dlhs", "tgmm")])
def test_at_uneven_routing_the_rule_is_near_the_fastest_it_admits(tiles, v5e, model, kernel_name):
    """128 experts over rows spread unevenly (`models.ROUTING_SKEW`): the rule's tiles against the fastest tiling the
    v5e timed that the rule may take (within its VMEM model, row tiles of 128 and more); the gmm and dlhs of
    gpt-oss-120b, which ran out of HBM making their inputs in the first sweep, from the second."""
    s = next(e for e in IMBALANCED if e.model == model)
    measured = [(t, sec) for m, k, t, sec in _records(tiles, v5e, UNEVEN) if m == model and k == kernel_name]
    times = {t: sec for t, sec in measured if sec is not None and tiles.fits(kernel_name, t, v5e)}
    assert len(times) >= 10 and any(t.tm == 128 for t in times), f"{model} {kernel_name}: {len(times)} tilings timed"
    chosen = tiles.choose(kernel_name, s.rows, s.hidden, s.out, s.experts, v5e)
    assert chosen in times, f"{model} {kernel_name}: the rule's {chosen} was not measured"
    best = min(times, key=times.get)
    assert times[chosen] <= UNEVEN_BOUND[kernel_name] * times[best], (chosen, times[chosen], best, times[best])


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", ["v5e", "v5p", "v6e"])
def test_every_model_shape_gets_wide_tiles_that_fit_the_chip(tiles, emulation, kernel, chip):
    with emulation.emulated_chip(chip):
        on = kernel.roofline.chip()
    for s in EXPERTS:
        for name in ("gmm", "dlhs", "tgmm"):
            t = tiles.choose(name, s.rows, s.hidden, s.out, s.experts, on)
            assert tiles.fits(name, t, on), (chip, s.model, name, t)
            cube = tiles.seconds(name, s.rows, s.hidden, s.out, s.experts, tiles.Tiles(128, 128, 128), on)
            assert tiles.seconds(name, s.rows, s.hidden, s.out, s.experts, t, on) < cube / 2, (chip, s.model, name, t)


def _config(kernel, emulation, chip: str, m: int, k: int, n: int, g: int, released: bool = False):  # noqa: ANN001
    hook = kernel.ops.tpu.RaggedDot.__module__.rsplit(".", 1)[0] + ".tiles_hook"
    import contextlib
    import importlib

    around = importlib.import_module(hook).upstream_heuristics() if released else contextlib.nullcontext()
    specs = dict(lhs=jax.ShapeDtypeStruct((m, k), jnp.bfloat16), rhs=jax.ShapeDtypeStruct((g, k, n), jnp.bfloat16),
                 group_sizes=jax.ShapeDtypeStruct((g,), jnp.int32))
    with kernel.ops.config.cross_compile(True), emulation.emulated_chip(chip), around, \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        c = kernel.ops.tpu.RaggedDot().bind(**specs).default_config
    return (c.tile_m, c.tile_k, c.tile_n)


@pytest.mark.kernels_ci
def test_upstreams_op_takes_the_rule_where_its_table_has_no_entry(kernel, emulation, tiles):
    m, k, n, g = 12288, 3072, 6144, 16  # no table holds it
    for chip in ("v5e", "v6e"):
        with emulation.emulated_chip(chip):
            want = tuple(tiles.choose("gmm", m, k, n, g, kernel.roofline.chip()))
        assert _config(kernel, emulation, chip, m, k, n, g) == want != (128, 128, 128), chip
        assert _config(kernel, emulation, chip, m, k, n, g, released=True) == (128, 128, 128), chip
    # TPU7x: upstream's own heuristic, with or without the hook
    assert _config(kernel, emulation, "v7x", m, k, n, g) == _config(kernel, emulation, "v7x", m, k, n, g, True)


@pytest.mark.kernels_ci
def test_on_the_v5e_every_shape_ran_faster_than_with_upstreams_default_tiles():
    """The benchmark before (upstream's 128-cube tiles) and after (the rule), both on the v5e."""
    def tokamax(path) -> dict:  # noqa: ANN001
        return {(r["case"], r["pass"]): r["median_s"] for r in json.loads(path.read_text())["records"]
                if r["op"] == "grouped_matmul" and r["impl"] == "tokamax" and r["median_s"]}
    before = tokamax(next(MEASURED.glob("v5e-*-bench-a9c94e4.json")))
    runs = sorted(MEASURED.glob("v5e-*-bench-moe-*.json"))  # the rule, then the measured tiles (test_measured.py)
    assert len(runs) >= 2
    for path in runs:
        after = tokamax(path)
        assert set(before) == set(after) and len(after) == 2 * len(EXPERTS), path.name
        slow = {key: before[key] / after[key] for key in after if before[key] / after[key] < 3}
        assert not slow, f"{path.name}: less than 3x faster than the default tiles: {slow}"


@pytest.mark.kernels_ci
def test_the_row_tile_divides_the_rows(tiles, v5e):
    """The kernels need the rows to be a multiple of the row tile (or the tile all of them)."""
    for m in (1000, 1280, 1536, 2304, 3000 * 128, 8192 + 128):
        for name in ("gmm", "dlhs", "tgmm"):
            t = tiles.choose(name, m, 2048, 1024, 8, v5e)
            assert m % t.tm == 0, (m, name, t)
    assert tiles.choose("gmm", 1100, 2048, 1024, 8, v5e) == (128, 128, 128)  # refused whatever the tiles, as upstream


@pytest.mark.parametrize("m", [1280, 700])
def test_the_public_op_with_the_rules_tiles_matches_the_reference(kernel, emulation, tiles, m):
    """Interpret mode on the v5e's tiling: rows a wider tile does not divide, a contraction (720) that is no
    multiple of the k tile, 37 rows past the groups; values and both gradients against XLA at HIGHEST."""
    k, n, g = 720, 640, 3
    r = np.random.default_rng(m)
    lhs = jnp.asarray(r.standard_normal((m, k)), jnp.float32)
    rhs = jnp.asarray(r.standard_normal((g, k, n)) * k ** -0.5, jnp.float32)
    gs = jnp.asarray(r.multinomial(m - 37, np.ones(g) / g), jnp.int32)
    kept = m - 37  # rows past the groups are undefined in upstream's call

    def run(fn):  # noqa: ANN001, ANN202
        def loss(a, b):  # noqa: ANN001, ANN202
            return (fn(a, b)[:kept] ** 2).sum()
        return lambda a, b: (fn(a, b)[:kept], *jax.grad(loss, (0, 1))(a, b))

    with emulation.emulated_chip("v5e"):
        want_tiles = {name: tiles.choose(name, m, k, n, g, kernel.roofline.chip(), 4) for name in ("gmm", "dlhs")}
    assert all(m % t.tm == 0 for t in want_tiles.values()) and want_tiles["gmm"] != (128, 128, 128), want_tiles
    with emulation.interpret_on_cpu("v5e"), kernel.ops.config.cross_compile(True):
        got = jax.jit(run(lambda a, b: kernel.ops.ragged_dot(a, b, gs, implementation="mosaic")))(lhs, rhs)
    want = run(lambda a, b: jax.lax.ragged_dot(a, b, gs, precision=jax.lax.Precision.HIGHEST))(lhs, rhs)
    for name, g_, w in zip(("out", "dlhs", "drhs"), got, want, strict=True):
        # float32 sums of 720 (out, dlhs: 640) terms in another order: a few units of 2^-24 relative
        assert float(jnp.linalg.norm(g_[:kept] - w[:kept]) / jnp.linalg.norm(w[:kept])) < 1e-5, name


@pytest.mark.kernels_ci
def test_the_op_raises_the_vmem_limit_only_for_tiles_past_the_default(kernel, emulation, tiles):
    """port.kdl's `vmem_limit_bytes`, as the Op asks the tile hook: the chip's raised limit for tiles past libtpu's
    default scoped VMEM (Qwen3-235B-A22B's gmm in 128 x 4096 x 1536, 28 MiB by `tiles.vmem_bytes`), libtpu's default
    (None) for tiles within it, within `upstream_heuristics()`, and on TPU7x (whose raised limit is its default)."""
    import importlib

    op = importlib.import_module(kernel.ops.tpu.RaggedDot.__module__)
    hook = importlib.import_module(op.__name__.rsplit(".", 1)[0] + ".tiles_hook")
    lhs = jax.ShapeDtypeStruct((65536, 4096), jnp.bfloat16)
    rhs = jax.ShapeDtypeStruct((128, 4096, 1536), jnp.bfloat16)
    wide, narrow = op.Config(tile_m=128, tile_k=4096, tile_n=1536), op.Config(tile_m=256, tile_k=4096, tile_n=512)
    with emulation.emulated_chip("v5e"):
        assert tiles.vmem_bytes("gmm", tiles.Tiles(128, 4096, 1536)) > kernel.roofline.chip().scoped_vmem
        assert hook.vmem_limit("gmm", wide, lhs, rhs) == 64 << 20
        assert hook.vmem_limit("gmm", narrow, lhs, rhs) is None
        with hook.upstream_heuristics():
            assert hook.vmem_limit("gmm", wide, lhs, rhs) is None
    with emulation.emulated_chip("v7x"):
        assert hook.vmem_limit("gmm", wide, lhs, rhs) is None
