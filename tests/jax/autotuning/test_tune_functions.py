"""`tokamax.tuning.tune_functions`: JAX users' `tune` (and the chip tier's `tools.chip tune`, which made the v5e's
shipped tiles): a function's forward and backward traced, every upstream Op it asks a config for tuned, one file;
the grouped matmul's candidates the roofline's fastest first. Interpret mode on the emulated v5e here (the
timings mean nothing; the machinery is what is checked)."""

from __future__ import annotations

import importlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

M, K, N, G = 512, 256, 256, 4
MAX_CONFIGS = 3


@pytest.fixture(scope="module")
def tuned(kernel, tmp_path_factory):
    def step(a, b, g):  # noqa: ANN001, ANN202
        return jax.value_and_grad(lambda a, b: kernel.ops.ragged_dot(a, b, g).astype(jnp.float32).sum(), (0, 1))(a, b)

    r = np.random.default_rng(0)  # arrays on one side, shapes on the other: both are taken as shapes
    args = (jnp.asarray(r.standard_normal((M, K)), jnp.bfloat16), jax.ShapeDtypeStruct((G, K, N), jnp.bfloat16),
            jax.ShapeDtypeStruct((G,), jnp.int32))
    path = tmp_path_factory.mktemp("tune") / "v5e.json"
    result = kernel.tuning.tune_functions([("experts", step, args)], out=path, chip="v5e", max_configs=MAX_CONFIGS,
                                          progress_bar=False)
    return result, path


def test_the_forward_and_both_backward_calls_are_tuned_into_one_file(kernel, tuned):
    result, path = tuned
    assert result.entries == {"experts": 3} and result.skipped == [] and result.device_kind == "TPU v5 lite"
    kind, table = kernel.moe.measured.read(path)
    assert kind == "TPU v5 lite"
    assert {(k.kernel, k.m, k.k, k.n, k.groups, k.itemsize) for k in table} == {
        (name, M, K, N, G, 2) for name in ("gmm", "dlhs", "tgmm")}
    assert json.loads(path.read_text())["tokamax_version"] == kernel.TOKAMAX_VERSION


def test_the_grouped_matmuls_candidates_are_the_roofline_fastest_and_the_heuristic(kernel, tuned, emulation):
    result, _ = tuned
    tiles, measured = kernel.moe.tiles, kernel.moe.measured
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")  # `tuning.tune` is the function
    with emulation.emulated_chip("v5e"):
        on = kernel.roofline.chip()
        for ba, data in result.result.data:
            key = measured.key_of(ba)
            timed = {(tiles.Tiles(c.tile_m, c.tile_k, c.tile_n), c.input_buffer_count) for c in data}
            heuristic = tiles.for_call(key.kernel, key.m, key.k, key.n, key.groups, key.itemsize)
            space = {tiles.Tiles(c.tile_m, c.tile_k, c.tile_n) for c in ba.autotuning_configs}
            # the roofline's order (the heuristic's tiles among them), its first tiles at upstream's buffering and
            # then at the deeper one; the heuristic's own config is timed once, first
            ranked = tiles.rank(key.kernel, M, K, N, G, sorted(space | {heuristic}), on)
            order = [(t, b) for t in ranked[:tune.DEEPER_FIRST] for b in (measured.BUFFERS, tune.DEEPER_BUFFERS)]
            order = [c for c in order + [(t, measured.BUFFERS) for t in ranked[tune.DEEPER_FIRST:]]
                     if c != (heuristic, measured.BUFFERS)]
            assert len(data) == MAX_CONFIGS and (heuristic, measured.BUFFERS) in timed, (key, timed)
            assert timed == {(heuristic, measured.BUFFERS), *order[:MAX_CONFIGS - 1]}, (key, timed, order[:4])
            assert any(b == tune.DEEPER_BUFFERS for _, b in timed), timed


@pytest.mark.kernels_ci
def test_the_grouped_matmuls_candidates_add_column_tiles_that_divide_each_dimension(kernel):
    """gpt-oss-20b's gmm: n = 5,760 = 45 x 128, which no power of two divides past 128; the tiles of whole lanes
    that divide it (384, 640, 1152, 1920) join upstream's, the contraction's 2,880 (not a multiple of 128) none."""
    tiles, measured = kernel.moe.tiles, kernel.moe.measured
    key = measured.Key("gmm", 16384, 2880, 5760, 32, 2)
    tune = importlib.import_module(f"{kernel.__name__}.tuning.tune")  # `tuning.tune` is the function
    added = tune._dividing([tiles.Tiles(128, 2880, 1024), tiles.Tiles(256, 1024, 2048)], key)
    assert {t.tn for t in added} == {128, 384, 640, 1152, 1920}
    assert {t.tk for t in added} == {2880, 1024}  # only the tiles' own: nothing of whole lanes divides 2,880
    assert tiles.Tiles(128, 2880, 1152) in added and all(5760 % t.tn == 0 for t in added if t.tn != 2048)
