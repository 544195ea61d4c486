"""JSON form of op arguments and configs, as upstream writes them in its autotuning tables.

Upstream serializes bound arguments with pydantic: arrays as short shape strings
(`"bf16[8192,4096]"`), dtypes and enums by name, dataclasses as their fields, callables by
import path, tuples as lists. The autotuning tables are keyed by that form, so this module
produces it for a call's arguments; `canonical` makes the text order-independent.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np


def _shape_string(x: Any) -> str:
    text = jax.core.ShapedArray(x.shape, x.dtype).str_short(short_dtypes=True)
    vmap_axes = getattr(x, "vmap_axes", None)
    if vmap_axes:
        axes = json.dumps([list(a) if a is not None else None for a in vmap_axes], separators=(",", ":"))
        return f"{text}{{vmap_axes={axes}}}"
    return text


def _callable_path(fn: Any) -> str:
    while True:
        if getattr(fn, "_fun", None) is not None:
            fn = fn._fun
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", getattr(fn, "__name__", None))
    return f"{module}.{name}" if module and name else str(fn)


def to_json_value(x: Any) -> Any:
    """`x` as upstream's serializer writes it (JSON-ready Python values)."""
    if isinstance(x, enum.IntEnum):  # config fields (splash's QKVLayout): pydantic dumps these by value
        return x.value
    if isinstance(x, enum.Enum):  # argument enums (precision, str enums too): upstream dumps them by name
        return x.name
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, (np.generic,)) and not isinstance(x, np.dtype):
        return x.item()
    if isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
        return _shape_string(x)
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return np.dtype(x).name
    if isinstance(x, jax.sharding.ManualAxisType):
        return {"varying": list(x.varying), "unreduced": list(x.unreduced), "reduced": list(x.reduced)}
    if hasattr(x, "repr_value_or_total_size"):  # ragged dot GroupSizes
        r = x.repr_value_or_total_size
        return {"num_groups": int(x.value.size), "total_size": r} if isinstance(r, int) else list(r)
    if isinstance(x, jax.lax.RaggedDotDimensionNumbers):
        return {f.name: to_json_value(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {"__type": f"{type(x).__module__}.{type(x).__qualname__}"} if hasattr(x, "config_cls") else {}
        out.update({f.name: to_json_value(getattr(x, f.name)) for f in dataclasses.fields(x)})
        return out
    if isinstance(x, Mapping):
        return {str(k): to_json_value(v) for k, v in x.items()}
    if isinstance(x, (tuple, list, set, frozenset)):
        return [to_json_value(v) for v in x]
    if callable(x):
        return _callable_path(x)
    return str(x)


def canonical(value: Any) -> str:
    """Order-independent JSON text of an already JSON-ready value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def dumps(x: Any) -> bytes:
    """Compact JSON bytes of `x` (in argument order), as pydantic's `dump_json` returns."""
    return json.dumps(to_json_value(x), separators=(",", ":")).encode()
