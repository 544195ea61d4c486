"""Grouped-matmul tiles measured on a chip, shipped with the package and read by default on that chip.

Each file in `measured/` is an autotuning result (`AutotuningResult.dumps`, what `tokamax.tuning` writes; on a TPU
host `python3 -m tools.chip tune` makes it for the model shapes of tools/chip/models.py) for one device kind.
`lookup` gives a call the fastest tiles the chip measured for its exact (kernel, m, k, n, groups, itemsize),
and the input buffering count they ran with, before the tile rule guesses (`tiles.for_call`,
`tiles.buffers_for_call`). Only the ragged dot's unquantized entries; a file this build cannot read is set aside
with a warning, and the rule answers.
"""

from __future__ import annotations

import functools
import importlib
import json
import warnings
from pathlib import Path
from typing import Any, NamedTuple

FILES = Path(__file__).with_name("measured")
_API = ".._ported._src.autotuning.api"
_OP = ".._ported._src.ops.ragged_dot.pallas_mosaic_tpu"
_HOOK = ".._ported._src.ops.ragged_dot.tiles_hook"
BUFFERS = 2
"""Upstream's Config's default input buffering: what the rule's tiles run with (a measured entry's own count is
passed on by the tile hook)."""


class Key(NamedTuple):
    kernel: str  # "gmm", "dlhs" or "tgmm"
    m: int
    k: int
    n: int
    groups: int
    itemsize: int


class Measured(NamedTuple):
    tiles: tuple[int, int, int]  # (tile_m, tile_k, tile_n) in upstream's Config naming
    seconds: float  # the chip's median time for them
    source: str  # the file
    buffers: int = BUFFERS  # upstream's Config's input_buffer_count they ran with


def _module(name: str) -> Any:
    return importlib.import_module(name, __package__)


def key_of(ba: Any) -> Key | None:
    """The call an entry's bound arguments describe, or None where the entry is not an unquantized ragged dot."""
    op = _module(_OP)
    if not isinstance(ba.op, op.PallasMosaicTpuRaggedDot) or ba.op.qdtype is not None:
        return None
    call = _module(_HOOK)._call(ba, op.DEFAULT_RAGGED_DOT_DIM_NUMS, op.DLHS_RAGGED_DOT_DIM_NUMS,
                                op.DRHS_RAGGED_DOT_DIM_NUMS)
    return None if call is None else Key(*call)


def fastest(data: Any) -> tuple[Any, float] | None:
    """(config, median seconds) of the fastest config timed, or None (configs with tgmm's `combine_scopes` are not
    taken: the tile hook does not pass it on)."""
    timed = [(c, d.median_evaluation_time_ms / 1e3) for c, d in data.items()
             if not isinstance(d, BaseException) and not getattr(c, "combine_scopes", False)]
    return min(timed, key=lambda cd: cd[1]) if timed else None


def read(path: Path) -> tuple[str, dict[Key, Measured]]:
    """(device kind, the measured tiles by call) of one result file."""
    result = _module(_API).AutotuningResult.loads(path.read_text())
    table: dict[Key, Measured] = {}
    for ba, data in result.data:
        key, best = key_of(ba), fastest(data)
        if key is not None and best is not None:
            c, seconds = best
            table[key] = Measured((c.tile_m, c.tile_k, c.tile_n), seconds, path.name,
                                  getattr(c, "input_buffer_count", BUFFERS))
    return result.device_kind, table


def _set_aside(path: Path, e: Exception) -> None:
    warnings.warn(f"tokamax grouped matmul: the measured tiles in {path.name} cannot be read by this build "
                  f"({type(e).__name__}: {str(e)[:200]}); the tile rule chooses instead", stacklevel=3)


@functools.cache
def _files() -> dict[str, list[Path]]:
    """The shipped files by the device kind each names, read as plain JSON: upstream's reader (and its autotuning
    modules) loads only on the chip a file is for, at its first grouped-matmul call."""
    out: dict[str, list[Path]] = {}
    for path in sorted(FILES.glob("*.json")):
        try:
            kind = json.loads(path.read_text())["device_kind"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            _set_aside(path, e)
            continue
        out.setdefault(str(kind), []).append(path)
    return out


@functools.cache
def table(kind: str) -> dict[Key, Measured]:
    """The measured tiles the shipped files hold for device kind `kind` (read once); where two files hold a call,
    the faster entry (a later tune of some shapes, with more candidates, beside the first file)."""
    out: dict[Key, Measured] = {}
    for path in _files().get(kind, []):
        try:
            found = read(path)[1]
        except Exception as e:  # noqa: BLE001 - a file this build cannot read: the rule answers, and says so
            _set_aside(path, e)
            continue
        out |= {k: m for k, m in found.items() if k not in out or m.seconds < out[k].seconds}
    return out


def tables() -> dict[str, dict[Key, Measured]]:
    """Every shipped file's measured tiles, by device kind."""
    return {kind: table(kind) for kind in _files()}


def forget() -> None:
    """Read the files again at the next lookup (after `FILES` changed)."""
    _files.cache_clear()
    table.cache_clear()


def lookup(kind: str, key: Key) -> Measured | None:
    """What the chip of device kind `kind` measured fastest for `key`, or None."""
    return table(kind).get(key)
