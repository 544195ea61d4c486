"""Stand-in for pydantic: config dataclasses that enforce their fields' constraints, and JSON
dumps of op arguments.

Upstream declares configs with `@pydantic.dataclasses.dataclass(...)` and field constraints
(`PositiveInt`, `Annotated[int, Field(multiple_of=128, gt=0)]`), and dumps bound arguments to JSON
for profiling metadata. Here configs are dataclasses whose `__init__` checks the constraints upstream's
configs declare (`gt`, `ge`, `lt`, `le`, `multiple_of`, in unions with None too) before the fields are
set, raising `ValidationError` (a ValueError) with pydantic's wording and the field's name; values are
not coerced between types. Dumps go through `spec_json`, parsing (`TypeAdapter.validate_json` /
`validate_python`, e.g. upstream's `BOUND_ARGS_ADAPTER`) through `spec_parse`.
"""

from __future__ import annotations

import dataclasses as _dataclasses
import functools
import inspect
import json
import types
import typing
from typing import Annotated, Any

from . import plain_hooks, spec_json, spec_parse
from .plain_hooks import PlainSerializer, PlainValidator


class FieldInfo:
    """What `Field(...)` records, as `Annotated` metadata: the numeric constraints are enforced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def Field(*args: Any, **kwargs: Any) -> FieldInfo:  # noqa: N802 - pydantic's name
    return FieldInfo(*args, **kwargs)


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
StrictBool = bool

# pydantic's messages and error types for the constraints its Field takes, in the order pydantic
# checks them; like pydantic, a field reports its first failing constraint only.
_CONSTRAINTS = {
    "multiple_of": ("multiple_of", "Input should be a multiple of {}", lambda v, c: v % c == 0),
    "le": ("less_than_equal", "Input should be less than or equal to {}", lambda v, c: v <= c),
    "lt": ("less_than", "Input should be less than {}", lambda v, c: v < c),
    "ge": ("greater_than_equal", "Input should be greater than or equal to {}", lambda v, c: v >= c),
    "gt": ("greater_than", "Input should be greater than {}", lambda v, c: v > c),
}


class ValidationError(ValueError):
    """A config was given values its fields' constraints refuse (pydantic's ValidationError, a
    ValueError, with its message form: the count, the class, then each field and what it needs)."""

    def __init__(self, title: str, errors: list[dict[str, Any]]) -> None:
        self.title, self._errors = title, errors
        lines = [f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} for {title}"]
        for e in errors:
            lines += [".".join(map(str, e["loc"])), f"  {e['msg']} [type={e['type']}, input_value={e['input']!r}, "
                      f"input_type={type(e['input']).__name__}]"]
        super().__init__("\n".join(lines))

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)

    def error_count(self) -> int:
        return len(self._errors)


def _field_infos(annotation: Any, value: Any) -> list[FieldInfo]:
    """The FieldInfos that apply to `value` under `annotation` (Annotated, nested, or the member of
    a union with None that is not None)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = typing.get_args(annotation)
        return _field_infos(inner, value) + [m for m in metadata if isinstance(m, FieldInfo)]
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        if value is None:
            return []
        members = [m for m in typing.get_args(annotation) if m is not type(None)]
        return _field_infos(members[0], value) if len(members) == 1 else []
    return []


def _violations(name: str, annotation: Any, value: Any) -> list[dict[str, Any]]:
    """The field's first failing constraint, as pydantic reports it (none: [])."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    bounds = {}
    for info in _field_infos(annotation, value):
        bounds.update({k: v for k, v in info.kwargs.items() if k in _CONSTRAINTS and v is not None})
    for key, (kind, message, holds) in _CONSTRAINTS.items():
        if key in bounds and not holds(value, bounds[key]):
            return [dict(type=kind, loc=(name,), msg=message.format(bounds[key]), input=value,
                         ctx={key: bounds[key]})]
    return []


def _validating(cls: type) -> type:
    """`cls` (a dataclass) with an `__init__` that checks the constraints first."""
    init = cls.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        hints = _hints(cls)
        errors = [e for name, value in list(bound.arguments.items())[1:] if name in hints
                  for e in _violations(name, hints[name], value)]
        if errors:
            raise ValidationError(cls.__name__, errors)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate here: check nothing
        return {}


class ConfigDict(dict):
    """pydantic's model settings; nothing reads them here."""


def _dataclass(cls: type | None = None, /, **kwargs: Any) -> Any:
    kwargs.pop("config", None)

    def wrap(c: type) -> type:
        return _validating(_dataclasses.dataclass(**kwargs)(c))
    return wrap if cls is None else wrap(cls)


dataclasses = types.SimpleNamespace(dataclass=_dataclass)


def validate_call(fn: Any = None, /, **kwargs: Any) -> Any:
    """Upstream type-checks some calls at run time; here the call goes through unchecked."""
    return (lambda f: f) if fn is None else fn


class TypeAdapter:
    """Dumps values of a type to JSON and reads them back the way upstream's adapters do (arguments,
    configs, autotuning results); types carrying `PlainValidator` / `PlainSerializer` metadata go
    through those functions (`plain_hooks`)."""

    def __init__(self, type_: Any, *args: Any, **kwargs: Any) -> None:
        self.type = type_
        self._hooks = plain_hooks.has_hooks(type_)

    def __class_getitem__(cls, item: Any) -> type:
        return cls

    def dump_json(self, value: Any, /, *args: Any, **kwargs: Any) -> bytes:
        if self._hooks:
            return spec_json.write(plain_hooks.dump(value, self.type)).encode()
        return spec_json.dumps(value)

    def dump_python(self, value: Any, /, *args: Any, **kwargs: Any) -> Any:
        if self._hooks:
            return plain_hooks.dump(value, self.type)
        return spec_json.to_json_value(value)

    def validate_python(self, value: Any, /, **kwargs: Any) -> Any:
        """`value` (JSON-ready Python data) read back into the adapter's type (`spec_parse`)."""
        if self._hooks:
            return plain_hooks.load(value, self.type)
        if getattr(self.type, "__name__", "") == "BoundArguments" and hasattr(self.type, "vjp_arg_spec"):
            return spec_parse.bound_arguments_from_json(value, self.type)
        return spec_parse.from_json(value, self.type)

    def validate_json(self, data: str | bytes, /, **kwargs: Any) -> Any:
        """JSON text read back into the adapter's type."""
        return self.validate_python(json.loads(data))
