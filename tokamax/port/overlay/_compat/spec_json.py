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
import math
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


_ROOT = __name__.rsplit(".", 2)[0]  # this kernel's ported tree (`<kernel>._ported`), upstream's `tokamax`


def upstream_path(cls: type) -> str:
    """The import path upstream writes for `cls` (`tokamax._src...`), wherever this tree is loaded."""
    module = cls.__module__
    if module == _ROOT or module.startswith(_ROOT + "."):
        module = "tokamax" + module[len(_ROOT):]
    return f"{module}.{cls.__qualname__}"


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
    if isinstance(x, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):  # meshes: names, sizes and types only
        return {"axis_names": list(x.axis_names), "axis_sizes": [int(n) for n in x.axis_sizes],
                "axis_types": [t.name for t in x.axis_types]}
    if isinstance(x, jax.sharding.ManualAxisType):
        return {"varying": list(x.varying), "unreduced": list(x.unreduced), "reduced": list(x.reduced)}
    if hasattr(x, "repr_value_or_total_size"):  # ragged dot GroupSizes
        r = x.repr_value_or_total_size
        return {"num_groups": int(x.value.size), "total_size": r} if isinstance(r, int) else list(r)
    if isinstance(x, jax.lax.RaggedDotDimensionNumbers):
        return {f.name: to_json_value(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, BaseException):  # a failed autotuning candidate: pydantic refuses these too
        raise TypeError(f"Unable to serialize unknown type: {type(x)} (drop failed configs first, e.g. "
                        "AutotuningResult.dumps(prune_errors=True))")
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {"__type": upstream_path(type(x))} if hasattr(x, "config_cls") else {}
        out.update({f.name: to_json_value(getattr(x, f.name)) for f in dataclasses.fields(x)})
        return out
    if isinstance(x, Mapping):  # dataclass keys (configs) as their JSON text, as pydantic's json_schema keys
        return {_write(to_json_value(k)) if dataclasses.is_dataclass(k) else str(k): to_json_value(v)
                for k, v in x.items()}
    if isinstance(x, (tuple, list, set, frozenset)):
        return [to_json_value(v) for v in x]
    if callable(x):
        return _callable_path(x)
    return str(x)


def _float_text(x: float) -> str:
    """A float as pydantic's JSON writes it (shortest round-trip digits): `1e-6`, `0.00005`,
    `2.5e+38`, `1.0`; infinities and NaN as `null`."""
    if math.isnan(x) or math.isinf(x):
        return "null"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, text = ("-", repr(-x)) if x < 0 else ("", repr(x))
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + int(exp or 0) - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    if 0 < point <= 16:  # the decimal point falls within or just after the digits
        if len(digits) <= point:
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    rest = f".{digits[1:]}" if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{rest}e{point - 1:+d}"


def _write(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (int, str)):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_write(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(_write(v) for v in value) + "]"


def write(value: Any) -> str:
    """Compact JSON text of an already JSON-ready value, floats as pydantic writes them."""
    return _write(value)


def canonical(value: Any) -> str:
    """Order-independent JSON text of an already JSON-ready value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def dumps(x: Any) -> bytes:
    """Compact JSON bytes of `x` (in argument order), as pydantic's `dump_json` returns."""
    return _write(to_json_value(x)).encode()
