"""Autotuning result files (`AutotuningResult.dumps` text, ours or upstream's), read whole and written
whole (`write_whole`: a temporary file beside it, then one rename).

Each entry is read with upstream's own reader for it; the first one that fails stops the load with
an `AutotuningFileError` naming the file, the entry and its op, so a result is never applied in part;
a file another tokamax release wrote is refused whole.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .. import TOKAMAX_VERSION

_API = ".._ported._src.autotuning.api"  # upstream's, in this kernel's ported tree
_FIELDS = {"device_kind", "data", "tokamax_version"}


class AutotuningFileError(ValueError):
    """An autotuning result file that this build cannot apply; the message names file and entry."""


def _api() -> Any:
    return importlib.import_module(_API, __package__)


def _op_name(entry: Any) -> str:
    try:
        return str(entry[0]["op"]["__type"]).rsplit(".", 1)[-1]
    except (KeyError, IndexError, TypeError):
        return "?"


def parse(text: str | bytes, source: str) -> Any:
    """The `AutotuningResult` in `text` (what `dumps` wrote); `source` names it in errors."""
    api = _api()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise AutotuningFileError(f"tokamax autotuning result {source}: not JSON ({e})") from e
    if not isinstance(raw, dict) or not {"device_kind", "data"} <= raw.keys() or raw.keys() - _FIELDS:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise AutotuningFileError(f"tokamax autotuning result {source}: expected the fields {sorted(_FIELDS)} of "
                                  f"an AutotuningResult (AutotuningResult.dumps), got {got}")
    if not isinstance(raw["device_kind"], str) or not isinstance(raw["data"], list):
        raise AutotuningFileError(f"tokamax autotuning result {source}: device_kind must be a string and data a list")
    version = raw.get("tokamax_version", "")
    if version and version != TOKAMAX_VERSION:  # its configs and keys are another release's: refused whole
        raise AutotuningFileError(f"tokamax autotuning result {source}: the file was written by tokamax {version}, "
                                  f"this build holds {TOKAMAX_VERSION}; tune again with this build")
    entries = []
    for i, entry in enumerate(raw["data"]):
        if not isinstance(entry, list) or len(entry) != 2:
            raise AutotuningFileError(f"tokamax autotuning result {source}, entry {i}: expected "
                                      f"[bound arguments, configs], got {str(entry)[:120]}")
        try:
            entries.append(api._validate_bound_args_autotuning_data(entry))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise AutotuningFileError(f"tokamax autotuning result {source}, entry {i} (op {_op_name(entry)}): "
                                      f"{e}") from e
    return api.AutotuningResult(raw["device_kind"], tuple(entries), *([version] if version else []))


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, or `AutotuningFileError` naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise AutotuningFileError(f"tokamax autotuning result {path}: cannot read it ({e.strerror})") from e


def load(path: str | Path) -> Any:
    """The `AutotuningResult` in the file at `path`, every entry read (or `AutotuningFileError`)."""
    return parse(read_bytes(path), str(path))


def write_whole(path: str | Path, text: str, what: str) -> Path:
    """Writes `text` to `path` whole or not at all: into a temporary file beside it, flushed to disk, then
    renamed over it in one step, so a failure part way (a full disk, a crash) leaves the file that was there,
    or none. `what` names the writer in errors. The file keeps the mode of the one it replaces (new: 0644)."""
    path = Path(path)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), path.stat().st_mode & 0o7777 if path.exists() else 0o644)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(scratch, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        if isinstance(e, OSError):
            raise OSError(e.errno, f"{what}: cannot write {path} ({e.strerror}); the file there is unchanged",
                          str(path)) from e
        raise
    return path
