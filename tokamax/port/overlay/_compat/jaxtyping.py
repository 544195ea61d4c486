"""Stand-in for jaxtyping: `Float[Array, "M K"]` annotations evaluate to their array type, and
`jaxtyped` checks nothing (upstream type-checks shapes at run time with pydantic)."""

from __future__ import annotations

import types
from typing import Any

import jax

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PyTree = Any


class AbstractArray:
    """Base of the dtype markers below; `Marker[T, "dims"]` is just `T`."""

    def __class_getitem__(cls, item: Any) -> Any:
        return item[0] if isinstance(item, tuple) else item


class Float(AbstractArray): ...
class Int(AbstractArray): ...
class Integer(AbstractArray): ...
class UInt(AbstractArray): ...
class Bool(AbstractArray): ...
class Num(AbstractArray): ...
class Real(AbstractArray): ...
class Inexact(AbstractArray): ...
class Shaped(AbstractArray): ...
class Key(AbstractArray): ...
class UInt8(AbstractArray): ...


Scalar = Any
ScalarLike = Any


def jaxtyped(fn: Any = None, /, **kwargs: Any) -> Any:
    return (lambda f: f) if fn is None else fn


config = types.SimpleNamespace(jaxtyping_disable=True, update=lambda name, value: None)
