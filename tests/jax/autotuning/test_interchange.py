"""Results move between this kernel and upstream tokamax 0.0.17 both ways, and steer here either way."""

from __future__ import annotations

import json

import pytest

from tests.jax.autotuning import calls
from tests.jax.public.normalise import normalise


def _fields(text: str) -> dict:
    return json.loads(text)


def test_upstream_reads_our_result_and_writes_the_same_fields(tuned_file, upstream_side):
    """Upstream's `loads` then `dumps` of our file gives back every field (compared as JSON values:
    key order is not part of the format)."""
    assert _fields(upstream_side["reloaded"]) == _fields(tuned_file.read_text())


def test_we_read_upstreams_result_and_write_the_same_fields(upstream_side, kernel):
    loaded = kernel.ops.AutotuningResult.loads(upstream_side["made"])
    assert _fields(loaded.dumps()) == _fields(upstream_side["made"])


def test_upstreams_result_steers_our_call_to_its_config(upstream_side, kernel, emulation, ragged_op_class):
    """Inside upstream's result our public call lowers to the same call given that config explicitly,
    whole module; outside, to our heuristic choice again. Upstream's own call inside the same result
    keeps its table/heuristic tiles (upstream 0.0.17's Op-equality bug, fixed here)."""
    result = kernel.ops.AutotuningResult.loads(upstream_side["made"])
    ((bound, data),) = result.data
    config = data.fastest_config
    assert {k: getattr(config, k) for k in upstream_side["made_config"]} == upstream_side["made_config"]
    module = lambda fn: normalise(calls.lower(fn, kernel.ops.config, emulation))  # noqa: E731
    outside = module(calls.public_call(kernel.ops))
    with result:
        inside = module(calls.public_call(kernel.ops))
    assert inside == module(calls.explicit_call(kernel.ops, ragged_op_class, config))
    assert inside != outside
    assert module(calls.public_call(kernel.ops)) == outside
    tiles = [str(config.tile_m), str(config.tile_k), str(config.tile_n)]
    assert upstream_side["tiles_inside"] == upstream_side["tiles_outside"] != [tiles]


@pytest.mark.kernels_ci
def test_our_json_is_upstreams_format(tuned_file):
    """What upstream's serializer writes: op by upstream's import path without config or VJP, arguments
    in their JSON form, each config as the JSON text of its fields mapping to its timings."""
    raw = _fields(tuned_file.read_text())
    assert set(raw) == {"device_kind", "data", "tokamax_version"} and raw["tokamax_version"] == "0.0.17"
    ((bound, configs),) = raw["data"]
    assert bound["op"]["__type"] == "tokamax._src.ops.ragged_dot.pallas_mosaic_tpu.PallasMosaicTpuRaggedDot"
    assert "config" not in bound["op"] and "vjp" not in bound["op"]
    assert bound["arguments"]["lhs"] == "bf16[128,256]"
    assert bound["arguments"]["group_sizes"] == {"num_groups": 2, "total_size": 128}
    for key, timings in configs.items():
        assert set(json.loads(key)) == {"tile_m", "tile_k", "tile_n", "input_buffer_count", "combine_scopes"}
        assert set(timings) == {"compile_time_ms", "lower_time_ms", "evaluation_times_ms", "metadata",
                                "peak_memory_mb"}
