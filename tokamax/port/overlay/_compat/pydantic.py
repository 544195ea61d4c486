"""Stand-in for pydantic: config dataclasses without validation, and JSON dumps of op arguments.

Upstream declares configs with `@pydantic.dataclasses.dataclass(...)` and field constraints
(`PositiveInt`, `Field(multiple_of=128)`), and dumps bound arguments to JSON for profiling
metadata. Here configs are plain dataclasses (constraints are not checked) and dumps go through
`spec_json`. Parsing (`validate_*`) is not offered: the autotuning tables are matched in JSON form.
"""

from __future__ import annotations

import dataclasses as _dataclasses
import types
from typing import Any

from . import spec_json

PositiveInt = int
NonNegativeInt = int
PositiveFloat = float
NonNegativeFloat = float
StrictBool = bool


class FieldInfo:
    """What `Field(...)` records; kept as `Annotated` metadata, never enforced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def Field(*args: Any, **kwargs: Any) -> FieldInfo:  # noqa: N802 - pydantic's name
    return FieldInfo(*args, **kwargs)


class PlainSerializer:
    """A serializer attached as `Annotated` metadata; serialization here goes through spec_json."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class ConfigDict(dict):
    """pydantic's model settings; nothing reads them here."""


def _dataclass(cls: type | None = None, /, **kwargs: Any) -> Any:
    kwargs.pop("config", None)
    wrap = _dataclasses.dataclass(**kwargs)
    return wrap if cls is None else wrap(cls)


dataclasses = types.SimpleNamespace(dataclass=_dataclass)


def validate_call(fn: Any = None, /, **kwargs: Any) -> Any:
    """Upstream type-checks some calls at run time; here the call goes through unchecked."""
    return (lambda f: f) if fn is None else fn


class TypeAdapter:
    """Dumps values of a type to JSON the way upstream's adapters do (arguments, configs)."""

    def __init__(self, type_: Any, *args: Any, **kwargs: Any) -> None:
        self.type = type_

    def __class_getitem__(cls, item: Any) -> type:
        return cls

    def dump_json(self, value: Any, /, **kwargs: Any) -> bytes:
        return spec_json.dumps(value)

    def dump_python(self, value: Any, /, **kwargs: Any) -> Any:
        return spec_json.to_json_value(value)

    def validate_python(self, value: Any, /, **kwargs: Any) -> Any:
        raise NotImplementedError("this kernel does not parse op specs (no pydantic); use upstream tokamax")

    validate_json = validate_python
