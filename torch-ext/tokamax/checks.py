"""Argument checks shared by the public JAX entry points (lm_head, lm_loss, distill, splash, ring): a bad call fails
first, with a message that names the op and the argument and says what was expected, instead of a traceback from
inside a kernel. Static only (ranks, shapes, dtypes, Python option values): nothing here reads an array's values,
so a check costs nothing under `jax.jit`. Imports none of the package's rooms (each of them imports this).

Messages read "tokamax <op>: <argument> must be <what>, got <what was given>".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

FLOATS = ("bfloat16", "float32")


def dtype_name(a: Any) -> str:
    """A JAX, NumPy or Torch array's dtype by name ("bfloat16")."""
    return str(a.dtype).removeprefix("torch.")


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(a.shape)


def array(op: str, name: str, a: Any) -> None:
    """`a` is an array (has a shape and a dtype): a list or a number is refused by name."""
    if not (hasattr(a, "shape") and hasattr(a, "dtype")):
        raise TypeError(f"tokamax {op}: {name} must be an array, got {type(a).__name__}")


def rank(op: str, name: str, a: Any, ranks: Sequence[int], layout: str) -> None:
    """`a` is an array of one of `ranks`; the message shows the expected `layout`, e.g. "[rows, hidden]"."""
    array(op, name, a)
    if len(a.shape) not in ranks:
        raise ValueError(f"tokamax {op}: {name} must be {layout}, got shape {_shape(a)}")


def shape(op: str, name: str, a: Any, expected: Sequence[int | None], layout: str) -> None:
    """`a` has the `expected` shape (None: any size on that axis); the message shows `layout` and the sizes."""
    array(op, name, a)
    if len(a.shape) != len(expected) or any(e is not None and s != e for s, e in zip(a.shape, expected, strict=False)):
        want = ", ".join("*" if e is None else str(e) for e in expected)
        raise ValueError(f"tokamax {op}: {name} must be {layout} = [{want}], got shape {_shape(a)}")


def floats(op: str, **named: Any) -> None:
    """The named arrays are bfloat16 or float32 and share one dtype (the kernels take no other)."""
    for name, a in named.items():
        if dtype_name(a) not in FLOATS:
            raise TypeError(f"tokamax {op}: {name} must be bfloat16 or float32, got {dtype_name(a)}")
    if len({dtype_name(a) for a in named.values()}) > 1:
        raise TypeError(f"tokamax {op}: {' and '.join(named)} must share a dtype, got "
                        + ", ".join(dtype_name(a) for a in named.values()))


def integers(op: str, name: str, a: Any) -> None:
    """`a` has an integer dtype (labels, targets, ids: a float array would be read as indices)."""
    if not dtype_name(a).startswith(("int", "uint")):
        raise TypeError(f"tokamax {op}: {name} must have an integer dtype, got {dtype_name(a)}")


def int32(op: str, name: str, a: Any) -> None:
    if dtype_name(a) != "int32":
        raise TypeError(f"tokamax {op}: {name} must be int32, got {dtype_name(a)}")


def same(op: str, what: str, **sizes: int) -> None:
    """The named sizes agree, e.g. same("lm_head.loss", "the hidden size", x=x.shape[1], w=w.shape[1])."""
    first, *rest = sizes.values()
    if any(size != first for size in rest):
        given = ", ".join(f"{n} has {v}" for n, v in sizes.items())
        raise ValueError(f"tokamax {op}: {what} must agree: {given}")


def choice(op: str, name: str, value: object, allowed: Sequence[object]) -> None:
    """`value` is one of `allowed` (compared by type too: True is not 1)."""
    if not any(type(value) is type(a) and value == a for a in allowed):
        raise ValueError(f"tokamax {op}: {name} must be one of {list(allowed)}, got {value!r}")


def _number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def number(op: str, name: str, value: object, low: float = -math.inf, high: float = math.inf, *,
           low_open: bool = False, high_open: bool = False) -> None:
    """`value` is a Python number in the interval (`low`, `high`, each end closed unless `*_open`); NaN refused."""
    inside = _number(value) and (low < value if low_open else low <= value) and (
        value < high if high_open else value <= high)
    if not inside:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"tokamax {op}: {name} must be a number in {interval}, got {value!r}")


def positive(op: str, name: str, value: object, *, optional: bool = False) -> None:
    """`value` is a number > 0 (or None where `optional`)."""
    if optional and value is None:
        return
    if not (_number(value) and 0 < value < math.inf):
        raise ValueError(f"tokamax {op}: {name} must be a number > 0{' or None' if optional else ''}, got {value!r}")


def chunk(op: str, value: object, name: str = "chunk") -> None:
    """A chunk option: "auto", None or a positive int of rows."""
    if value is None or value == "auto" and isinstance(value, str):
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"tokamax {op}: {name} must be \"auto\", None or a positive number of rows, got {value!r}")
