"""pydantic's `PlainValidator` / `PlainSerializer` metadata, applied as pydantic applies them.

Upstream's `AutotuningResult` reads and writes its `(BoundArguments, AutotuningData)` pairs with
functions of its own, attached to the field's type as `Annotated[..., PlainValidator(f),
PlainSerializer(g)]`. A type that carries such metadata is walked here by its annotations
(dataclass fields, tuples, unions with None); at a hook its function takes the value, and
everywhere else `spec_json` / `spec_parse` do the work, so the JSON is upstream's.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from . import spec_json, spec_parse


class PlainValidator:
    """`Annotated` metadata: `func(raw)` reads the value (pydantic's plain validator)."""

    def __init__(self, func: Any, *args: Any, **kwargs: Any) -> None:
        self.func = func


class PlainSerializer:
    """`Annotated` metadata: `func(value, info)` writes the value (pydantic's plain serializer)."""

    def __init__(self, func: Any = None, *args: Any, **kwargs: Any) -> None:
        self.func = func


def _hook(annotation: Any, kind: type) -> tuple[Any, Any]:
    """(the annotation inside `Annotated`, the hook of `kind` it carries or None)."""
    if typing.get_origin(annotation) is Annotated:
        inner, *metadata = typing.get_args(annotation)
        return inner, next((m for m in metadata if isinstance(m, kind) and m.func is not None), None)
    return annotation, None


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def has_hooks(annotation: Any, _seen: frozenset = frozenset()) -> bool:
    """Whether `annotation` (walked through dataclass fields, tuples and unions) holds a hook."""
    inner, validator = _hook(annotation, PlainValidator)
    if validator is not None or _hook(annotation, PlainSerializer)[1] is not None:
        return True
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        if inner in _seen:
            return False
        try:
            hints = _field_hints(inner)
        except Exception:  # noqa: BLE001 - annotations that do not evaluate here hold no hooks we can run
            return False
        return any(has_hooks(h, _seen | {inner}) for h in hints.values())
    return any(has_hooks(a, _seen) for a in typing.get_args(inner) if a is not Ellipsis)


def _call_serializer(func: Any, value: Any) -> Any:
    """`func(value, info)` or `func(value)`, as pydantic calls a plain serializer by its arity."""
    try:
        takes_info = len(inspect.signature(func).parameters) >= 2
    except (TypeError, ValueError):
        takes_info = False
    return func(value, None) if takes_info else func(value)


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Union or isinstance(annotation, types.UnionType):
        return typing.get_args(annotation)
    return ()


def dump(value: Any, annotation: Any) -> Any:
    """`value` as JSON-ready data, hooks applied where `annotation` has them."""
    inner, serializer = _hook(annotation, PlainSerializer)
    if serializer is not None:
        return spec_json.to_json_value(_call_serializer(serializer.func, value))
    if value is None:
        return None
    if members := [m for m in _members(inner) if m is not type(None)]:
        return dump(value, members[0]) if len(members) == 1 else spec_json.to_json_value(value)
    if typing.get_origin(inner) is tuple and isinstance(value, (tuple, list)):
        args = typing.get_args(inner)
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        return [dump(v, a) for v, a in zip(value, items, strict=True)]
    if isinstance(inner, type) and dataclasses.is_dataclass(inner) and isinstance(value, inner):
        hints = _field_hints(inner)
        return {f.name: dump(getattr(value, f.name), hints.get(f.name, Any)) for f in dataclasses.fields(inner)}
    return spec_json.to_json_value(value)


def load(value: Any, annotation: Any, where: str = "value") -> Any:
    """JSON-ready `value` read as `annotation`, hooks applied where it has them."""
    inner, validator = _hook(annotation, PlainValidator)
    if validator is not None:
        try:
            return validator.func(value)
        except spec_parse.SpecError:
            raise
        except (ValueError, TypeError, KeyError) as e:
            raise spec_parse.SpecError(f"{where}: {e}") from e
    if not has_hooks(inner):
        return spec_parse.from_json(value, inner, where)
    if value is None and type(None) in _members(inner):
        return None
    if members := [m for m in _members(inner) if m is not type(None)]:
        return load(value, members[0], where)
    if typing.get_origin(inner) is tuple:
        if not isinstance(value, (list, tuple)):
            raise spec_parse.SpecError(f"{where}: expected a list, got {str(value)[:200]}")
        args = typing.get_args(inner)
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(items) != len(value):
            raise spec_parse.SpecError(f"{where}: expected {len(items)} items, got {len(value)}")
        return tuple(load(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, items, strict=True)))
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        if not isinstance(value, Mapping):
            raise spec_parse.SpecError(f"{where}: expected the fields of {inner.__name__}, got {str(value)[:200]}")
        hints, fields = _field_hints(inner), {f.name for f in dataclasses.fields(inner) if f.init}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise spec_parse.SpecError(f"{where}: {inner.__name__} has no field {unknown[0]!r}")
        return inner(**{k: load(v, hints.get(k, Any), f"{where}.{k}") for k, v in value.items()})
    return spec_parse.from_json(value, inner, where)
