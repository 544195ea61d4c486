"""A ragged-dot table key (upstream's JSON form) turned back into call arguments.

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
          "s32": jnp.int32, "i32": jnp.int32, "s4": jnp.int4, "f8_e4m3fn": jnp.float8_e4m3fn,
          "f8_e5m2": jnp.float8_e5m2, "f4_e2m1fn": jnp.float4_e2m1fn}


def shape_dtype(text: str) -> jax.ShapeDtypeStruct:
    match = _SHAPE.match(text)
    if match is None:
        raise ValueError(f"not a shape string: {text!r}")
    dims = tuple(int(d) for d in match.group(2).split(",") if d)
    return jax.ShapeDtypeStruct(dims, _SHORT[match.group(1)])


def operand(value: Any, api: Any) -> Any:
    """An array operand: a shape string, a qwix `QArray` or an `AsQArray` in JSON form."""
    if isinstance(value, str):
        return shape_dtype(value)
    if "qvalue" in value:
        zero_point = None if value["zero_point"] is None else shape_dtype(value["zero_point"])
        return api.qwix.QArray(shape_dtype(value["qvalue"]), shape_dtype(value["scale"]), zero_point,
                               _import(value["qtype"]))
    return api.AsQArray(shape_dtype(value["value"]), _import(value["qtype"]),
                        channelwise_axes=tuple(value["channelwise_axes"]), tiled_axes=value["tiled_axes"] and
                        {int(a): t for a, t in value["tiled_axes"].items()},
                        calibration_method=value["calibration_method"])


def ragged_dot_arguments(key: dict, group_sizes_cls: Any, api: Any) -> dict[str, Any]:
    """Keyword arguments for `RaggedDot.bind` equal to the table key `key`."""
    gs = key["group_sizes"]
    if isinstance(gs, dict):
        group_sizes = group_sizes_cls(jax.ShapeDtypeStruct((gs["num_groups"],), jnp.int32), gs["total_size"])
    elif isinstance(gs, list):  # representative sizes, held as numpy (no device), as upstream parses them
        group_sizes = group_sizes_cls(jax.ShapeDtypeStruct((len(gs),), jnp.int32), tuple(gs))
    else:
        group_sizes = shape_dtype(gs)
    dims = key["ragged_dot_dimension_numbers"]
    (lc, rc), (lb, rb) = dims["dot_dimension_numbers"]
    precision = key["precision"]
    mat = key["manual_axis_type"]
    return dict(
        lhs=operand(key["lhs"], api),
        rhs=operand(key["rhs"], api),
        group_sizes=group_sizes,
        ragged_dot_dimension_numbers=jax.lax.RaggedDotDimensionNumbers(
            dot_dimension_numbers=((lc, rc), (lb, rb)),
            lhs_ragged_dimensions=dims["lhs_ragged_dimensions"],
            rhs_group_dimensions=dims["rhs_group_dimensions"]),
        precision=(tuple(jax.lax.Precision[p] for p in precision) if isinstance(precision, list)
                   else jax.lax.DotAlgorithmPreset[precision]),
        preferred_element_type=(None if key["preferred_element_type"] is None
                                else jnp.dtype(key["preferred_element_type"])),
        return_residuals=key["return_residuals"],
        activation=None if key["activation"] is None else _import(key["activation"]),
        manual_axis_type=None if mat is None else jax.sharding.ManualAxisType(
            **{k: frozenset(v) for k, v in mat.items()}),
        group_offset=None if key["group_offset"] is None else shape_dtype(key["group_offset"]),
        zero_initialize=key["zero_initialize"],
        fuse_gateup_activation=key["fuse_gateup_activation"],
    )


def _import(path: str) -> Any:
    """An object by import path; a bare name is a dtype name (`float8_e4m3fn`)."""
    if "." not in path:
        return jnp.dtype(path)
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
