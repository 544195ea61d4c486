"""Table keys (upstream's JSON form) turned back into call arguments: the pieces every op shares.

Written for the tests from the key fields upstream's tables hold, independently of the
kernel's own JSON matching (`_compat/spec_json.py`), so the selection test exercises the same
path a real call takes: arguments -> bind -> key -> table.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import jax
import jax.numpy as jnp

_SHAPE = re.compile(r"^([a-z0-9_]+)\[([0-9,]*)\]$")
_SHORT = {"bf16": jnp.bfloat16, "f32": jnp.float32, "f16": jnp.float16, "s8": jnp.int8, "i8": jnp.int8,
          "s32": jnp.int32, "i32": jnp.int32, "u32": jnp.uint32, "s4": jnp.int4, "pred": jnp.bool_,
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
