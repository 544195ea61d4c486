"""Op specs parsed back from their JSON form (what `spec_json` writes, and upstream's pydantic
writes in its profiling metadata, autotuning results and tables) into upstream's objects, as
upstream's pydantic adapters parse them: each value read through the annotation of the field or
parameter it belongs to.

- arrays (jax.Array, numpy arrays, ShapeDtypeStructs, array annotations): "bf16[8,4]" becomes a
  `jax.ShapeDtypeStruct`, with a `{vmap_axes=[...]}` suffix upstream's `BatchedShapeDtype`;
- enums by name (int enums by value too), numpy dtypes and dtype-likes by name, classes and callables
  by import path, tuples and sequences as tuples, mappings as immutable dicts, literals checked;
- dataclasses (configs, masks, dimension numbers, ...) field by field, an Op from its `__type` path
  with its fields; ragged dot's group sizes, manual axis types and meshes as upstream reads them;
- unions: the first member (None first for null, enums before plain strings) that reads the value.

A `BoundArguments` is the op, then its arguments through the op's `_fwd` signature. Import paths of
upstream (`tokamax._src...`) resolve to this kernel's ported tree (an installed `tokamax` only for names
the tree lacks).
A value no member of its annotation reads raises `ValueError` naming the path to it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Annotated, Any, Literal

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

_SHAPE = re.compile(r"^(.*?)\[([0-9,]*)\](\{vmap_axes=(\[.*\])\})?$")
_SHORT_DTYPES = {"bool": np.bool_, "pred": np.bool_, "i2": ml_dtypes.int2, "i4": ml_dtypes.int4, "i8": np.int8,
                 "i16": np.int16, "i32": np.int32, "i64": np.int64, "u2": ml_dtypes.uint2, "u4": ml_dtypes.uint4,
                 "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "bf16": jnp.bfloat16,
                 "f16": np.float16, "f32": np.float32, "f64": np.float64, "c64": np.complex64,
                 "c128": np.complex128}
_ROOT = __name__.rsplit(".", 2)[0]  # this kernel's ported tree (`<kernel>._ported`)


class SpecError(ValueError):
    """A value that its annotation does not read."""


def import_path(path: str) -> Any:
    """The object at a dotted import path (module, then attributes); upstream's `tokamax.` paths
    resolve to this kernel's ported tree first."""
    candidates = [path]
    if path.startswith("tokamax."):  # this tree first: a `tokamax` installed beside it is another build
        candidates.insert(0, _ROOT + path[len("tokamax"):])
    for candidate in candidates:
        parts = candidate.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for name in parts[split:]:
                    obj = getattr(obj, name)
            except AttributeError:
                break
            return obj
    raise SpecError(f"cannot import {path!r}")


def _array(value: Any, where: str) -> jax.ShapeDtypeStruct:
    match = _SHAPE.match(value) if isinstance(value, str) else None
    if match is None:
        raise SpecError(f"{where}: expected an array's shape string such as 'bf16[8,4]', got {value!r}")
    name, dims, _, vmap = match.groups()
    dtype = _SHORT_DTYPES.get(name)
    if dtype is None:  # the float8/float4 forms: f8_e4m3fn, f4_e2m1fn, ...
        long = re.sub(r"^f(\d)_", r"float\1_", name)
        try:
            dtype = jnp.dtype(long)
        except TypeError as e:
            raise SpecError(f"{where}: unknown dtype {name!r} in {value!r}") from e
    shape = tuple(int(d) for d in dims.split(",") if d)
    if vmap is None:
        return jax.ShapeDtypeStruct(shape, dtype)
    batching = importlib.import_module(f"{_ROOT}._src.batching")
    axes = [tuple(a) if a is not None else None for a in json.loads(vmap)]
    return batching.BatchedShapeDtype(shape, dtype, vmap_axes=axes)


def _is_array_type(annotation: Any) -> bool:
    if isinstance(annotation, type):
        if hasattr(annotation, "dim_str") and hasattr(annotation, "dtypes"):  # jaxtyping-style annotations
            return True
        return issubclass(annotation, (jax.Array, np.ndarray, jax.ShapeDtypeStruct, jax.core.ShapedArray))
    return False


def _is_dtype_like(annotation: Any) -> bool:
    return annotation is np.dtype or annotation == jax.typing.DTypeLike or annotation == jax.typing.DTypeLike | None


def _dtype(value: Any, where: str) -> Any:
    """A dtype by name; a dotted path (`jax.numpy.int8`, how a scalar type is written) is imported."""
    if value is None:
        return None
    if isinstance(value, str) and "." in value:
        return import_path(value)
    try:
        return np.dtype(value) if not isinstance(value, str) or value not in _SHORT_DTYPES else \
            np.dtype(_SHORT_DTYPES[value])
    except TypeError as e:
        raise SpecError(f"{where}: expected a dtype name, got {value!r}") from e


@functools.cache
def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # noqa: BLE001 - annotations that do not evaluate here: the raw ones
        target = obj.__init__ if isinstance(obj, type) else obj
        return {n: p.annotation for n, p in inspect.signature(target).parameters.items()
                if p.annotation is not inspect.Parameter.empty}


def _dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: expected the fields of {cls.__name__}, got {value!r}")
    value = dict(value)
    if "__type" in value:  # an instance of a subclass, named by its path
        named = import_path(value.pop("__type"))
        if not (isinstance(named, type) and issubclass(named, cls)):
            raise SpecError(f"{where}: {named!r} is not a {cls.__name__}")
        cls = named
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(value) - set(fields)
    if unknown:
        raise SpecError(f"{where}: {cls.__name__} has no field {sorted(unknown)[0]!r}")
    kwargs = {name: from_json(v, hints.get(name, Any), f"{where}.{name}") for name, v in value.items()
              if fields[name].init}
    return cls(**kwargs)


def _special(cls: type, value: Any, where: str) -> Any:
    """Types upstream reads with schemas of their own."""
    name = cls.__name__
    if name == "NullConfig" and isinstance(value, Mapping):  # an Op without configs: nothing to read
        return cls()  # (upstream's pydantic reads any fields into it, ignoring them)
    if name == "GroupSizes":  # ragged dot: {num_groups, total_size} or the representative sizes
        if isinstance(value, Mapping):
            return cls(jax.ShapeDtypeStruct([value["num_groups"]], jnp.int32), value["total_size"])
        return cls(jax.ShapeDtypeStruct([len(value)], jnp.int32), tuple(value))
    if issubclass(cls, jax.sharding.ManualAxisType):
        return cls(**{k: frozenset(v) for k, v in value.items()})
    if issubclass(cls, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
        types_ = tuple(jax.sharding.AxisType[t] for t in value["axis_types"])
        return jax.sharding.AbstractMesh(tuple(value["axis_sizes"]), tuple(value["axis_names"]), axis_types=types_)
    raise KeyError(name)


def _enum(cls: type[enum.Enum], value: Any, where: str) -> Any:
    if isinstance(value, str) and value in cls.__members__:
        return cls[value]
    try:
        return cls(value)
    except ValueError as e:
        raise SpecError(f"{where}: {value!r} names no {cls.__name__}") from e


def _union(members: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in members:
        return None
    ordered = sorted((m for m in members if m is not type(None)),
                     key=lambda m: 0 if isinstance(m, type) and issubclass(m, enum.Enum) else
                     (2 if m is str else 1))
    errors = []
    for member in ordered:
        try:
            return from_json(value, member, where)
        except (SpecError, TypeError, KeyError, ValueError) as e:
            errors.append(str(e))
    raise SpecError(f"{where}: no member of the union reads {value!r} ({'; '.join(errors[:3])})")


def from_json(value: Any, annotation: Any, where: str = "value") -> Any:
    """`value` (parsed JSON) read as `annotation` says (see the module docstring)."""
    if annotation is Any or annotation is inspect.Parameter.empty or isinstance(annotation, typing.TypeVar):
        return _guess(value)
    if _is_dtype_like(annotation):
        return _dtype(value, where)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return from_json(value, args[0], where)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return _union(args, value, where)
    if annotation is type(None) or annotation is None:
        if value is not None:
            raise SpecError(f"{where}: expected null, got {value!r}")
        return None
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (type, Callable) or annotation is Callable:
        return import_path(value) if isinstance(value, str) else value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise SpecError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(from_json(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args or [Any] * len(value),
                                                                                  strict=True)))
    if origin in (list, Sequence, Collection, set, frozenset):
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(from_json(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise SpecError(f"{where}: expected a mapping, got {value!r}")
        item = args[1] if len(args) == 2 else Any
        immutabledict = importlib.import_module(f"{_ROOT}._vendor.immutabledict").immutabledict
        return immutabledict({k: from_json(v, item, f"{where}.{k}") for k, v in value.items()})
    if isinstance(origin, type) and issubclass(origin, Mapping) and origin not in (dict, Mapping):
        return _generic_mapping(origin, args, value, where)
    cls = origin if isinstance(origin, type) else annotation
    if not isinstance(cls, type):
        return _guess(value)
    if _is_array_type(cls):
        return _array(value, where)
    if issubclass(cls, enum.Enum):
        return _enum(cls, value, where)
    try:
        return _special(cls, value, where)
    except KeyError:
        pass
    if dataclasses.is_dataclass(cls):
        return _dataclass(cls, value, where)
    if cls is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: expected a bool, got {value!r}")
        return value
    if cls is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where}: expected an int, got {value!r}")
        return value
    if cls is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if cls is str:
        if not isinstance(value, str):
            raise SpecError(f"{where}: expected a string, got {value!r}")
        return value
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping) and "__type" in value:
        return _dataclass(import_path(value["__type"]), value, where)
    raise SpecError(f"{where}: {value!r} is not a {cls.__name__}")


def _generic_mapping(origin: type, args: tuple[Any, ...], value: Any, where: str) -> Any:
    """A generic mapping class (upstream's `AutotuningData[Config]`: an immutabledict of config to
    benchmark data): key and value types from its generic base, keys that are JSON text (pydantic's
    `json_schema` keys, how configs are written) parsed first."""
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: expected a mapping, got {str(value)[:200]}")
    bindings = dict(zip(getattr(origin, "__parameters__", ()), args, strict=False))
    key_type, item_type = Any, Any
    for base in getattr(origin, "__orig_bases__", ()):
        base_args = typing.get_args(base)
        base_origin = typing.get_origin(base)
        if len(base_args) == 2 and isinstance(base_origin, type) and issubclass(base_origin, Mapping):
            key_type, item_type = (bindings.get(a, a) if isinstance(a, typing.TypeVar) else a for a in base_args)
            break
    out = {}
    for k, v in value.items():
        raw = k
        if isinstance(k, str) and key_type not in (str, Any) and not isinstance(key_type, typing.TypeVar):
            try:
                raw = json.loads(k)
            except json.JSONDecodeError as e:
                raise SpecError(f"{where}: key {k!r} is not JSON text: {e}") from e
        key = from_json(raw, key_type, f"{where}[{k}]")
        out[key] = from_json(v, item_type, f"{where}[{k}]")
    return origin(out)


def _guess(value: Any) -> Any:
    """A value without an annotation: shape strings as arrays, lists as tuples."""
    if isinstance(value, str) and _SHAPE.match(value):
        try:
            return _array(value, "value")
        except SpecError:
            return value
    if isinstance(value, list):
        return tuple(_guess(v) for v in value)
    if isinstance(value, Mapping) and "__type" in value:
        return _dataclass(import_path(value["__type"]), value, "value")
    return value


def op_from_json(value: Any, where: str = "op") -> Any:
    """An Op (or another dataclass named by `__type`) from its JSON fields."""
    if not isinstance(value, Mapping) or "__type" not in value:
        raise SpecError(f"{where}: expected an op's fields with its '__type', got {value!r}")
    return _dataclass(import_path(value["__type"]), value, where)


def bound_arguments_from_json(value: Any, bound_arguments_cls: type) -> Any:
    """upstream's `BoundArguments(op, arguments)`: the op, then each argument through its `_fwd`."""
    if not isinstance(value, Mapping) or set(value) != {"op", "arguments"}:
        raise SpecError(f"expected {{'op': ..., 'arguments': ...}}, got {str(value)[:200]}")
    op = op_from_json(value["op"])
    hints = _hints(op._fwd)
    parameters = op._fwd_signature.parameters
    arguments = {}
    for name, v in value["arguments"].items():
        if name not in parameters:
            raise SpecError(f"arguments: {type(op).__name__} takes no argument {name!r}")
        arguments[name] = from_json(v, hints.get(name, parameters[name].annotation), f"arguments.{name}")
    return bound_arguments_cls(op, arguments)
