"""A ragged-dot table key turned back into `RaggedDot.bind` arguments (see keys.py)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .keys import import_path, shape_dtype

BASE = "_src.ops.ragged_dot.base"
QUANTIZATION = "_src.quantization"


def operand(value: Any, api: Any) -> Any:
    """An array operand: a shape string, a qwix `QArray` or an `AsQArray` in JSON form."""
    quantization = api.module(QUANTIZATION)
    if isinstance(value, str):
        return shape_dtype(value)
    if "qvalue" in value:
        return quantization.QArray(shape_dtype(value["qvalue"]), shape_dtype(value["scale"]),
                                   shape_dtype(value["zero_point"]), import_path(value["qtype"]))
    tiled = value["tiled_axes"]
    return quantization.AsQArray(shape_dtype(value["value"]), import_path(value["qtype"]),
                                 channelwise_axes=tuple(value["channelwise_axes"]),
                                 tiled_axes=None if tiled is None else {int(a): t for a, t in tiled.items()},
                                 calibration_method=value["calibration_method"])


def ragged_dot_arguments(key: dict, api: Any) -> dict[str, Any]:
    """Keyword arguments for `RaggedDot.bind` equal to the table key `key`."""
    group_sizes_cls = api.module(BASE).GroupSizes
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
        activation=None if key["activation"] is None else import_path(key["activation"]),
        manual_axis_type=None if mat is None else jax.sharding.ManualAxisType(
            **{k: frozenset(v) for k, v in mat.items()}),
        group_offset=shape_dtype(key["group_offset"]),
        zero_initialize=key["zero_initialize"],
        fuse_gateup_activation=key["fuse_gateup_activation"],
    )


