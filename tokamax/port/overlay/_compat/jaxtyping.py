"""Stand-in for jaxtyping: array annotations that keep their dtype family and dimensions
(`Float[Array, "b t h d"]`), and `jaxtyped`, which checks them when the function is called, as
upstream's jaxtyping (with pydantic as its type checker) does, without either package.

What is checked, for every argument and the return value annotated with an array type (directly,
in a union with other types or None, or inside a fixed tuple):

- the dtype family: Float, Int, UInt, Integer, Bool, Num, Real, Inexact, Complex, Shaped (any),
  Key (PRNG keys), and the single dtypes (UInt8, Int8, BFloat16, Float32, ...);
- the dimensions: fixed sizes (`128`), named sizes (`M`: equal wherever the name appears in the
  call), broadcastable names (`#M`: 1 or the name's size), anonymous (`_`), arithmetic of names
  (`H*K`), and one variadic run per annotation (`...`, `*batch`: a named run equal wherever it
  appears; `*#batch`: broadcast-compatible with it, in numpy's sense, as jaxtyping checks it).

Values without a shape and dtype (scalars, other classes) are matched against the union's other
members by `isinstance`, or pass when there are none that can be checked. Annotations of the real
jaxtyping (used by callers who have it) are read the same way. A mismatch raises `TypeCheckError`
(a TypeError and a ValueError; also an instance of jaxtyping's own `TypeCheckError` when the caller
has imported jaxtyping), naming the function, the argument, the dimension and where it was bound.
`config.update("jaxtyping_disable", True)` turns the checks off.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types
import typing
from typing import Any

import jax
import numpy as np

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PyTree = Any
Scalar = Any
ScalarLike = Any

_UINTS = ("uint2", "uint4", "uint8", "uint16", "uint32", "uint64")
_INTS = ("int2", "int4", "int8", "int16", "int32", "int64")
_FLOATS = ("float4_e2m1fn", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
           "float8_e5m2fnuz", "bfloat16", "float16", "float32", "float64")
_COMPLEX = ("complex64", "complex128")
_KEY = "prng_key"


class AbstractArray:
    """An array annotation: `Marker[ArrayType, "dims"]` is a subclass with `dtypes` (None: any),
    `dim_str` and `array_type`, as jaxtyping's are."""

    dtypes: tuple[str, ...] | None = None
    dim_str: str = "..."
    array_type: Any = Array

    def __class_getitem__(cls, item: Any) -> type:
        array_type, dims = item if isinstance(item, tuple) else (item, "...")
        return _annotation(cls, array_type, dims)


@functools.cache
def _annotation(marker: type, array_type: Any, dims: str) -> type:
    name = f"{marker.__name__}[{getattr(array_type, '__name__', array_type)}, {dims!r}]"
    return types.new_class(name, (marker,), {}, lambda ns: ns.update(array_type=array_type, dim_str=dims))


def _family(name: str, dtypes: tuple[str, ...] | None) -> type:
    return types.new_class(name, (AbstractArray,), {}, lambda ns: ns.update(dtypes=dtypes))


Float = _family("Float", _FLOATS)
Int = _family("Int", _INTS)
UInt = _family("UInt", _UINTS)
Integer = _family("Integer", _UINTS + _INTS)
Bool = _family("Bool", ("bool",))
Num = _family("Num", _UINTS + _INTS + _FLOATS + _COMPLEX)
Real = _family("Real", _UINTS + _INTS + _FLOATS)
Inexact = _family("Inexact", _FLOATS + _COMPLEX)
Complex = _family("Complex", _COMPLEX)
Shaped = _family("Shaped", None)
Key = _family("Key", (_KEY,))
UInt8 = _family("UInt8", ("uint8",))
Int8 = _family("Int8", ("int8",))
Int32 = _family("Int32", ("int32",))
BFloat16 = _family("BFloat16", ("bfloat16",))
Float32 = _family("Float32", ("float32",))


class TypeCheckError(TypeError, ValueError):
    """An argument or return value does not match its annotation."""


def _error(message: str) -> TypeCheckError:
    """The error to raise: also jaxtyping's own class when the caller has imported jaxtyping."""
    real = getattr(sys.modules.get("jaxtyping"), "TypeCheckError", None)
    if isinstance(real, type) and issubclass(real, BaseException):
        return type("TypeCheckError", (TypeCheckError, real), {})(message)
    return TypeCheckError(message)


config = types.SimpleNamespace(jaxtyping_disable=False)
config.update = lambda name, value: setattr(config, name, value)


# ---- Reading annotations -------------------------------------------------------------------
def _is_array_annotation(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "dim_str") and hasattr(annotation, "dtypes")


def _dtype_names(annotation: Any) -> tuple[str, ...] | None:
    """The dtype names an annotation admits (None: any); jaxtyping's own classes are read as ours."""
    dtypes = annotation.dtypes
    if dtypes is None or not isinstance(dtypes, (list, tuple)):  # jaxtyping's Shaped: an "any dtype" object
        return None
    return tuple(str(d) for d in dtypes)


_TOKEN = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


class _Dims:
    """The sizes named so far in one call, and where each was first seen."""

    def __init__(self) -> None:
        self.sizes: dict[str, Any] = {}
        self.where: dict[str, str] = {}
        self.broadcast: dict[str, bool] = {}  # variadic runs: was the last binding `*#name`

    def copy(self) -> _Dims:
        other = _Dims()
        other.sizes, other.where, other.broadcast = dict(self.sizes), dict(self.where), dict(self.broadcast)
        return other

    def bind(self, name: str, size: Any, where: str) -> str | None:
        """None if `size` agrees with what `name` holds (binding it if new), else the complaint."""
        if name not in self.sizes:
            self.sizes[name], self.where[name] = size, where
            return None
        if self.sizes[name] != size:
            return f"{name} = {self.sizes[name]} (from {self.where[name]})"
        return None


def _dim_mismatch(token: str, size: int, dims: _Dims, where: str) -> str | None:
    """None if one dimension of `size` fits `token`, else what the token needs."""
    broadcast = token.startswith("#")
    token = token.lstrip("#")
    if token in ("_", "") or (broadcast and size == 1):
        return None
    if token.isdigit():
        return None if size == int(token) else token
    if _TOKEN.match(token):
        return dims.bind(token, size, where)
    names = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", token)  # arithmetic of names, e.g. "H*K"
    if all(n in dims.sizes and isinstance(dims.sizes[n], int) for n in names):
        try:
            want = eval(token, {"__builtins__": {}}, dict(dims.sizes))  # noqa: S307 - names bound to ints only
        except Exception:  # noqa: BLE001 - a form this checker does not read: pass, as unknown forms do
            return None
        return None if size == want else f"{token} = {want}"
    return None


def _shape_mismatch(shape: tuple[int, ...], dim_str: str, dims: _Dims, where: str) -> str | None:
    tokens = dim_str.split()
    variadic = [i for i, t in enumerate(tokens) if t == "..." or t.startswith(("*", "#*"))]
    if len(variadic) > 1:  # more than jaxtyping takes: nothing to check
        return None
    if not variadic:
        if len(shape) != len(tokens):
            return f"{len(tokens)} dimensions"
        pairs, run = list(zip(tokens, shape, strict=True)), None
    else:
        v = variadic[0]
        before, after = tokens[:v], tokens[v + 1:]
        if len(shape) < len(before) + len(after):
            return f"at least {len(before) + len(after)} dimensions"
        pairs = list(zip(before, shape[:len(before)], strict=True))
        pairs += list(zip(after, shape[len(shape) - len(after):], strict=True))
        run = (tokens[v], tuple(shape[len(before):len(shape) - len(after)]))
    for token, size in pairs:
        complaint = _dim_mismatch(token, size, dims, where)
        if complaint is not None:
            return complaint
    if run is not None and run[0] != "...":
        return _run_mismatch(run[0].replace("*", "").replace("#", ""), "#" in run[0], run[1], dims, where)
    return None


def _run_mismatch(name: str, broadcast: bool, shape: tuple[int, ...], dims: _Dims, where: str) -> str | None:
    """A named variadic run, as jaxtyping checks it: equal to the run bound before, or where
    either binding is `*#name`, broadcast-compatible with it in numpy's sense (runs of other
    lengths included); a broadcast binding then holds the broadcast shape."""
    if not name:
        return None
    if name not in dims.sizes:
        dims.bind(name, shape, where)
        dims.broadcast[name] = broadcast
        return None
    bound, bound_broadcast = dims.sizes[name], dims.broadcast.get(name, False)
    complaint = f"*{name} = {bound} (from {dims.where[name]})"
    if not (broadcast or bound_broadcast):
        return None if shape == bound else complaint
    try:
        merged = tuple(np.broadcast_shapes(shape, bound))
    except ValueError:
        return complaint
    if bound_broadcast:
        if not broadcast and merged != shape:
            return complaint
        dims.sizes[name], dims.broadcast[name] = merged, broadcast
        return None
    return None if merged == bound else complaint


def _dtype_of(value: Any) -> str:
    dtype = value.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return _KEY
    return np.dtype(dtype).name


def _describe(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"a {_dtype_of(value)} array of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


def _check_array(value: Any, annotation: type, dims: _Dims, where: str) -> str | None:
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return None if value is not None else "an array, got None"
    names = _dtype_names(annotation)
    if names is not None and _dtype_of(value) not in names:
        return f"a dtype in {annotation.__name__.split('[')[0]} ({', '.join(names)})"
    complaint = _shape_mismatch(tuple(value.shape), annotation.dim_str, dims, where)
    return None if complaint is None else f"shape {annotation.dim_str!r}, where {complaint}"


def _check(value: Any, annotation: Any, dims: _Dims, where: str) -> str | None:
    """None if `value` fits `annotation` (binding its dimensions into `dims`), else what it needs."""
    if _is_array_annotation(annotation):
        return _check_array(value, annotation, dims, where)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        if value is None and type(None) in args:
            return None
        complaints = []
        for member in args:
            if member is type(None):
                continue
            trial = dims.copy()
            if _is_array_annotation(member) and not hasattr(value, "shape"):
                complaints.append("an array")
                continue
            complaint = _check(value, member, trial, where)
            if complaint is None and (_is_array_annotation(member) or _instance(value, member)):
                dims.sizes, dims.where = trial.sizes, trial.where
                return None
            complaints.append(complaint or getattr(member, "__name__", str(member)))
        checkable = [m for m in args if _is_array_annotation(m) or isinstance(m, type)]
        return " or ".join(str(c) for c in complaints) if checkable and len(checkable) == len(args) else None
    if origin is tuple and args and args[-1] is not Ellipsis and isinstance(value, (tuple, list)):
        if len(value) != len(args):
            return None  # a shape this checker does not read
        for i, (item, member) in enumerate(zip(value, args, strict=True)):
            complaint = _check(item, member, dims, f"{where}[{i}]")
            if complaint is not None:
                return f"[{i}]: {complaint}"
    return None


def _instance(value: Any, member: Any) -> bool:
    try:
        return isinstance(member, type) and isinstance(value, member)
    except TypeError:
        return False


# ---- The decorator -------------------------------------------------------------------------
def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate here: the raw ones
        return {n: p.annotation for n, p in inspect.signature(fn).parameters.items()
                if p.annotation is not inspect.Parameter.empty}


def jaxtyped(fn: Any = None, /, **kwargs: Any) -> Any:
    """Checks `fn`'s array annotations at each call (see the module docstring); `typechecker=` and
    other options are accepted and ignored."""
    if fn is None:
        return lambda f: jaxtyped(f, **kwargs)
    signature = inspect.signature(fn)
    hints: dict[str, Any] | None = None

    @functools.wraps(fn)
    def checked(*args: Any, **kw: Any) -> Any:
        nonlocal hints
        if config.jaxtyping_disable:
            return fn(*args, **kw)
        if hints is None:
            hints = _hints(fn)
        try:
            bound = signature.bind(*args, **kw)
        except TypeError:
            return fn(*args, **kw)  # the call itself is wrong: let the function say so
        dims = _Dims()
        for name, value in bound.arguments.items():
            if name in hints:
                complaint = _check(value, hints[name], dims, f"argument {name!r}")
                if complaint is not None:
                    raise _error(f"{fn.__qualname__}: argument {name!r} is {_describe(value)}; "
                                 f"its annotation needs {complaint}")
        result = fn(*args, **kw)
        if "return" in hints:
            complaint = _check(result, hints["return"], dims, "the return value")
            if complaint is not None:
                raise _error(f"{fn.__qualname__}: the return value is {_describe(result)}; "
                             f"its annotation needs {complaint}")
        return result

    return checked
