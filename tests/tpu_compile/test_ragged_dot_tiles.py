"""Issue 51: the tiles upstream's ragged dot lowers with at the chip benchmark's expert shapes
(tools/chip/models.py EXPERTS), on each of the compile cases that test_compile.py compiles for them
(tools/tpu_compile/cases/ragged_dot.py `expert_cases`, every tier's: lowering alone is quick).

The tiles are read from the lowered module: upstream's Op records on each kernel call a profiling payload
(`xla_metadata_payload`) holding the Config the kernel ran with and the call's shapes and dimension numbers.
Before TPU7x every gmm, dlhs and tgmm call must carry the tiles the chip measured (`tokamax.moe.measured`: the
v5e's at every one of these shapes) or else `tokamax.moe.tiles.choose`'s, and not the
128 x 128 x 128 that upstream's heuristics give these calls (shown: the same lowering under
`tiles_hook.upstream_heuristics()`); on TPU7x upstream's own heuristic, the same Config as under
`upstream_heuristics()`.
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

import pytest

from tools.tpu_compile import compiler, topology
from tools.tpu_compile.cases import ragged_dot

CASES = ragged_dot.expert_cases()  # every tier's: lowering alone takes a second or two
DEFAULT_TILES = (128, 128, 128)

_PAYLOAD = re.compile(r'xla_metadata_payload = "tokamax:((?:[^"\\]|\\[0-9A-Fa-f]{2})*)"')
_SHAPE = re.compile(r"^[a-z0-9]+\[([\d,]*)\]$")
# upstream's three dimension numbers, as the payload writes them -> the kernel (tokamax.moe.tiles' names)
_KERNELS = {
    ((((1,), (1,)), ((), ())), (0,), (0,)): "gmm",
    ((((1,), (2,)), ((), ())), (0,), (0,)): "dlhs",
    ((((0,), (0,)), ((), ())), (0,), ()): "tgmm",
}


def _tuple(x: Any) -> Any:
    return tuple(_tuple(v) for v in x) if isinstance(x, list) else x


def _shape(text: str) -> tuple[int, ...]:
    found = _SHAPE.match(text)
    assert found, f"not an array's type: {text!r}"
    return tuple(int(d) for d in found.group(1).split(",") if d)


def kernel_calls(module_text: str) -> dict[str, set[tuple]]:
    """kernel -> {(config, lhs shape, rhs shape, groups)} of every Mosaic ragged-dot call the payloads record."""
    calls: dict[str, set[tuple]] = {}
    for raw in set(_PAYLOAD.findall(module_text)):
        payload = json.loads(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), raw))
        if not payload["op"]["__type"].endswith(".PallasMosaicTpuRaggedDot"):
            continue
        args, dims = payload["arguments"], payload["arguments"]["ragged_dot_dimension_numbers"]
        key = (_tuple(dims["dot_dimension_numbers"]), _tuple(dims["lhs_ragged_dimensions"]),
               _tuple(dims["rhs_group_dimensions"]))
        assert key in _KERNELS, f"dimension numbers of no ragged-dot kernel: {dims}"
        config = tuple(sorted(payload["op"]["config"].items()))
        calls.setdefault(_KERNELS[key], set()).add(
            (config, _shape(args["lhs"]), _shape(args["rhs"]), args["group_sizes"]["num_groups"]))
    return calls


_CALL = re.compile(r"custom_call @tpu_custom_call[^\n]*")
_NAME = re.compile(r"pallas_tpu_ragged_dot_[a-z_]+")
_SCOPED = re.compile(r"scoped_memory_configs\\22: \[\{[^}]*?\\22size\\22: (\d+)")
_CALLED = {"pallas_tpu_ragged_dot_gmm": "gmm", "pallas_tpu_ragged_dot_gmm_transpose_rhs": "dlhs",
           "pallas_tpu_ragged_dot_tgmm": "tgmm"}


def vmem_limits(module_text: str) -> dict[str, set[int | None]]:
    """kernel -> {the scoped VMEM limit its Mosaic calls are compiled with, None for libtpu's default}."""
    limits: dict[str, set[int | None]] = {}
    for line in _CALL.findall(module_text):
        if (name := _NAME.search(line)) is None:
            continue
        size = _SCOPED.search(line)
        limits.setdefault(_CALLED[name.group(0)], set()).add(int(size.group(1)) if size else None)
    return limits


def test_the_vmem_limits_are_read():
    text = ('%1 = stablehlo.custom_call @tpu_custom_call(%a) {backend_config = "{\\22custom_call_config\\22: '
            '{\\22kernel_name\\22: \\22pallas_tpu_ragged_dot_gmm_transpose_rhs\\22, \\22scoped_memory_configs\\22: '
            '[{\\22memory_space\\22:1, \\22offset\\22: 0, \\22size\\22: 67108864}]}"}\n'
            '%2 = stablehlo.custom_call @tpu_custom_call(%b) {backend_config = "{\\22kernel_name\\22: '
            '\\22pallas_tpu_ragged_dot_tgmm\\22}"}\n')
    assert vmem_limits(text) == {"dlhs": {67108864}, "tgmm": {None}}


def _tiles(config: tuple) -> tuple[int, int, int]:
    c = dict(config)
    return c["tile_m"], c["tile_k"], c["tile_n"]


def _module(kernel: Any, name: str) -> Any:
    """The kernel's module `name` (tokamax.moe.tiles, tokamax.roofline, the port's tiles_hook)."""
    return importlib.import_module(f"{kernel.__name__}.{name}")


def test_the_payloads_are_read():
    """The payload as the lowered module writes it (quotes as \\22): a dlhs call and its Config."""
    text = ('%0 = call @gmm(%a) {mhlo.frontend_attributes = {xla_metadata_payload = "tokamax:{\\22op\\22:{\\22__type'
            '\\22:\\22k._ported._src.ops.ragged_dot.pallas_mosaic_tpu.PallasMosaicTpuRaggedDot\\22,\\22config\\22:'
            '{\\22tile_m\\22:512,\\22tile_k\\22:1024,\\22tile_n\\22:256}},\\22arguments\\22:{\\22lhs\\22:\\22bf16'
            '[4096,768]\\22,\\22rhs\\22:\\22bf16[8,2048,768]\\22,\\22group_sizes\\22:{\\22num_groups\\22:8},'
            '\\22ragged_dot_dimension_numbers\\22:{\\22dot_dimension_numbers\\22:[[[1],[2]],[[],[]]],'
            '\\22lhs_ragged_dimensions\\22:[0],\\22rhs_group_dimensions\\22:[0]}}}"}}')
    assert kernel_calls(text) == {
        "dlhs": {((("tile_k", 1024), ("tile_m", 512), ("tile_n", 256)), (4096, 768), (8, 2048, 768), 8)}}


@pytest.mark.parametrize("case, shape, grad", [pytest.param(*c, id=c[0].name) for c in CASES])
def test_the_call_lowers_with_the_rules_tiles(kernel, case, shape, grad):
    m, k, n, groups = shape.rows, shape.hidden, shape.out, shape.experts
    # each kernel's operands as upstream's Config names the dimensions (tokamax.moe.tiles)
    operands = {"gmm": ((m, k), (groups, k, n)), "dlhs": ((m, n), (groups, k, n)), "tgmm": ((m, k), (m, n))}
    text = compiler.lower(case, kernel).as_text()
    calls = kernel_calls(text)
    assert set(calls) == ({"gmm", "dlhs", "tgmm"} if grad else {"gmm"}), calls
    for which, found in calls.items():
        assert len(found) == 1, f"{which}: more than one call or Config: {found}"
        [(_, lhs, rhs, num_groups)] = found
        assert (lhs, rhs, num_groups) == (*operands[which], groups), (which, lhs, rhs, num_groups)

    with _module(kernel, "_ported._src.ops.ragged_dot.tiles_hook").upstream_heuristics():
        upstream = kernel_calls(compiler.lower(case, kernel).as_text())
    chip = topology.chip(case.target)
    with compiler.tracing_for(kernel, chip):
        figures = _module(kernel, "roofline").chip()
    tiles = _module(kernel, "moe.tiles")
    if chip == "v7x":  # upstream's own heuristic, but a tgmm whose tiles do not fit the scoped VMEM (tiles_hook.fitted)
        for which, found in calls.items():
            [(config, *_)] = found
            [(released, *_)] = upstream[which]
            if which == "tgmm" and not tiles.fits("tgmm", tiles.Tiles(*_tiles(released)), figures):
                assert _tiles(config) == tuple(tiles.choose("tgmm", m, k, n, groups, figures, 2)), (which, config)
            else:
                assert found == upstream[which], (which, found, upstream[which])
        return
    measured = _module(kernel, "moe.measured")
    limits = vmem_limits(text)
    for which, found in calls.items():
        [(config, *_)] = found
        # the scoped VMEM raised for tiles past libtpu's default (port.kdl's vmem_limit_bytes), and only for those
        want = tiles.vmem_limit(which, tiles.Tiles(*_tiles(config)), figures, 2, dict(config)["input_buffer_count"])
        assert limits.get(which) == {want}, f"{case.name} {which}: VMEM limits {limits.get(which)}, expected {want}"
        # the tiles the chip measured fastest where its shipped file holds the call (the v5e at these shapes)
        held = measured.lookup(figures.kind, measured.Key(which, m, k, n, groups, 2))
        expected = tiles.Tiles(*held.tiles) if held else tiles.choose(which, m, k, n, groups, figures, 2)
        assert _tiles(config) == tuple(expected), f"{case.name} {which}: lowered with {config}, expected {expected}"
        assert held is not None or chip != "v5e", f"{case.name} {which}: the v5e's file does not hold it"
        assert tuple(expected) != DEFAULT_TILES
        [(released, *_)] = upstream[which]
        assert _tiles(released) == DEFAULT_TILES, f"{which}: under upstream's heuristics {released}"
