"""Table keys (upstream's JSON form) turned back into call arguments: the pieces every op shares.

Written for the tests from the key fields upstream's tables hold, independently of the
kernel's own JSON matching (`_compat/spec_json.py`), so the selection test exercises the same
path a real call takes: arguments -> bind -> key -> table.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_SHAPE = re.compile(r"^([a-z0-9_]+)\[([0-9,]*)\]$")
_SHORT = {"bf16": jnp.bfloat16, "f32": jnp.float32, "f16": jnp.float16, "s8": jnp.int8, "i8": jnp.int8,
          "s32": jnp.int32, "i32": jnp.int32, "u32": jnp.uint32, "u8": jnp.uint8, "s4": jnp.int4, "pred": jnp.bool_,
          "bool": jnp.bool_, "f8_e4m3fn": jnp.float8_e4m3fn, "f8_e5m2": jnp.float8_e5m2,
          "f4_e2m1fn": jnp.float4_e2m1fn}


def shape_dtype(text: str | None) -> jax.ShapeDtypeStruct | None:
    if text is None:
        return None
    match = _SHAPE.match(text)
    if match is None:
        raise ValueError(f"not a shape string: {text!r}")
    dims = tuple(int(d) for d in match.group(2).split(",") if d)
    return jax.ShapeDtypeStruct(dims, _SHORT[match.group(1)])


def import_path(path: str) -> Any:
    """An object by import path; a bare name is a dtype name (`float8_e4m3fn`)."""
    if "." not in path:
        return jnp.dtype(path)
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _annotation_types(annotation: Any) -> list[Any]:
    out, todo = [], [annotation]
    while todo:
        t = todo.pop()
        out.append(t)
        todo.extend(typing.get_args(t))
    return out


def generic_arguments(key: dict, op: Any) -> dict[str, Any]:
    """`bind` arguments for a flat key (arrays, scalars, enum and dtype names), read through the Op's
    own `_fwd` annotations: what upstream's parser does for these ops' fields."""
    try:
        hints = typing.get_type_hints(op._fwd)
    except Exception:  # an annotation that does not evaluate here: use the raw ones
        hints = {n: p.annotation for n, p in inspect.signature(op._fwd).parameters.items()}
    args = {}
    for name, value in key.items():
        types = _annotation_types(hints.get(name, Any))
        enums = [t for t in types if isinstance(t, type) and issubclass(t, enum.Enum)]
        if isinstance(value, str) and _SHAPE.match(value):
            args[name] = shape_dtype(value)
        elif isinstance(value, str) and enums and any(value in e.__members__ for e in enums):
            args[name] = next(e[value] for e in enums if value in e.__members__)
        elif isinstance(value, str) and any(t is np.dtype or t is jax.typing.DTypeLike for t in types):
            args[name] = jnp.dtype(value)
        elif isinstance(value, list):
            args[name] = tuple(shape_dtype(v) if isinstance(v, str) and _SHAPE.match(v) else v for v in value)
        elif isinstance(value, dict):
            raise ValueError(f"key field {name!r} is structured ({value}); this op needs a parser of its own")
        else:
            args[name] = value
    return args
