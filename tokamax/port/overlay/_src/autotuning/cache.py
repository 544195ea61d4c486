"""Upstream's shipped autotuning tables, read lazily and matched on the JSON form of the call.

Each entry is the fastest config upstream timed for the key, with its timings, as upstream's
`AutotuningData` (config -> `BenchmarkData`).

Upstream parses each table key into arguments with pydantic, re-binds them and compares the
bound values. Without pydantic, the comparison is made on the other side of the same
serializer: a call's bound arguments go through `spec_json` into the JSON form the tables were
written in, and are looked up by canonical text. A table whose keys name other fields than the
op's signature fails loudly (upstream drift), as does a config the op's config class refuses.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import typing
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from ..._compat import spec_json
from ..benchmarking import BenchmarkData
from .autotuner import AutotuningData

DeviceKind = str
CACHE_PATH = "data/autotuning"
TABLES = Path(__file__).resolve().parents[2] / CACHE_PATH
_SNAKE = re.compile(r"(?!^)([A-Z])")


def table_path(op: Any, device_kind: str) -> Path:
    """Where the port put `op`'s table for `device_kind` (upstream's file naming)."""
    op_name = _SNAKE.sub(r"_\1", type(op).__name__).lower()
    return TABLES / device_kind.lower().replace(" ", "_") / f"{op_name}.json"


def _enum_type(annotation: typing.Any) -> type[enum.Enum] | None:
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return t
    return None


def _tuples(value: typing.Any) -> typing.Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _with_enums(config_cls: type, values: dict) -> dict:
    """Config fields from their JSON form, as pydantic reads them upstream: enums by name or by
    value, JSON lists as the tuples a (hashable) config holds, and names the config no longer has
    (older table entries) ignored, as pydantic dataclasses ignore extra fields."""
    hints = typing.get_type_hints(config_cls)
    known = {f.name for f in dataclasses.fields(config_cls)}
    out = {name: _tuples(value) for name, value in values.items() if name in known}
    for field in dataclasses.fields(config_cls):
        kind, value = _enum_type(hints.get(field.name)), out.get(field.name)
        if kind is not None and value is not None and not isinstance(value, kind):
            out[field.name] = kind[value] if isinstance(value, str) else kind(value)
    return out


class _Table(MutableMapping):
    """One device's table for one op: bound-argument keys -> AutotuningData. Results autotuned in
    this process (`BoundArguments.autotune(cache_results=True)`) are stored over the shipped ones."""

    def __init__(self, op: Any, path: Path) -> None:
        self.op, self.path = op, path
        self._entries: dict[str, tuple[dict | None, dict | None]] = {}
        self._tuned: dict[str, AutotuningData] = {}
        if path.is_file():
            fields = set(op._fwd_signature.parameters)
            for key, config, timings in json.loads(path.read_text())["entries"]:
                if set(key) != fields:
                    raise RuntimeError(f"{path}: a key names fields {sorted(set(key) ^ fields)} that "
                                       f"{type(op).__name__}'s signature does not; the table and the op disagree")
                self._entries[spec_json.canonical(key)] = (config, timings)

    def _data(self, entry: tuple[dict | None, dict | None]) -> AutotuningData:
        config, timings = entry
        if config is None:
            return AutotuningData()
        try:
            data = BenchmarkData(**{f.name: _tuples(timings[f.name]) for f in dataclasses.fields(BenchmarkData)
                                    if f.name in timings})
            return AutotuningData({self.op.config_cls(**_with_enums(self.op.config_cls, config)): data})
        except TypeError as e:
            raise RuntimeError(f"{self.path}: config {config} does not fit {self.op.config_cls.__name__}: {e}") from e

    def __getitem__(self, key: Any) -> AutotuningData:
        text = spec_json.canonical(spec_json.to_json_value(key))
        if text in self._tuned:
            return self._tuned[text]
        return self._data(self._entries[text])

    def __setitem__(self, key: Any, data: AutotuningData) -> None:
        self._tuned[spec_json.canonical(spec_json.to_json_value(key))] = data

    def __delitem__(self, key: Any) -> None:
        del self._tuned[spec_json.canonical(spec_json.to_json_value(key))]

    def __iter__(self):  # noqa: ANN204 - canonical key texts
        return iter(self._entries.keys() | self._tuned.keys())

    def __len__(self) -> int:
        return len(self._entries.keys() | self._tuned.keys())


class AutotuningCache(dict):
    """Per device kind, the op's table; loaded on first access."""

    def __init__(self, op: Any, paths: Any = (CACHE_PATH,)) -> None:
        super().__init__()
        self.op = op

    def __missing__(self, device_kind: DeviceKind) -> _Table:
        self[device_kind] = table = _Table(self.op, table_path(self.op, device_kind))
        return table


class _CacheAdapter:
    """What upstream's `_get_cache_adapter(op)` is to `AutotuningResult.dump_cache_str`: a writer of
    {argument key: AutotuningData} in upstream's table form (JSON text of the arguments ->
    {JSON text of a config -> its timings})."""

    def __init__(self, op: Any) -> None:
        self.op = op

    def dump_json(self, cache: Any, *, indent: int | None = None, **kwargs: Any) -> bytes:
        table = {spec_json.write(spec_json.to_json_value(dict(key))): spec_json.to_json_value(dict(data))
                 for key, data in cache.items()}
        return json.dumps(table, indent=indent).encode()


def _get_cache_adapter(op: Any) -> _CacheAdapter:
    return _CacheAdapter(op)
