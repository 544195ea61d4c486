"""Argument checks shared by the Torch ops: run before the kernel, so a bad call fails with a
message that names the op and the argument instead of a JAX traceback from inside the kernel."""

from __future__ import annotations

from collections.abc import Sequence

import torch

FLOATS = (torch.bfloat16, torch.float32)
DEVICES = ("tpu", "cpu", "meta")


def tensors(op: str, **named: torch.Tensor | None) -> None:
    """Each named argument is a tensor (None allowed for optional ones), all on one TPU/CPU/meta device."""
    given = {n: t for n, t in named.items() if t is not None}
    for name, t in given.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tokamax {op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    devices = {t.device.type for t in given.values()}
    if not devices <= set(DEVICES):
        raise ValueError(f"tokamax {op}: tensors must be on a TPU (or CPU, interpret mode), got {sorted(devices)}")
    if len({t.device for t in given.values()}) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in given.items())
        raise ValueError(f"tokamax {op}: all tensors must be on one device, got {where}")


def required(op: str, **named: torch.Tensor) -> None:
    """As `tensors`, for arguments that must be tensors: None is refused too."""
    for name, t in named.items():
        if t is None:
            raise TypeError(f"tokamax {op}: {name} must be a torch.Tensor, got None")
    tensors(op, **named)


def floats(op: str, **named: torch.Tensor) -> None:
    """The named tensors are bfloat16 or float32 and share one dtype."""
    for name, t in named.items():
        if t.dtype not in FLOATS:
            raise TypeError(f"tokamax {op}: {name} must be bfloat16 or float32, got {t.dtype}")
    if len({t.dtype for t in named.values()}) > 1:
        raise TypeError(f"tokamax {op}: {' and '.join(named)} must share a dtype, got "
                        + ", ".join(str(t.dtype) for t in named.values()))


def dtype(op: str, name: str, t: torch.Tensor, allowed: Sequence[torch.dtype]) -> None:
    """`t` has one of the `allowed` dtypes."""
    if t.dtype not in allowed:
        names = " or ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"tokamax {op}: {name} must be {names}, got {t.dtype}")


def rank(op: str, name: str, t: torch.Tensor, ranks: tuple[int, ...], layout: str) -> None:
    """`t` has one of the ranks; the message shows the expected `layout`, e.g. "[m, k]"."""
    if t.dim() not in ranks:
        raise ValueError(f"tokamax {op}: {name} must be {layout}, got shape {tuple(t.shape)}")


def shape(op: str, name: str, t: torch.Tensor, expected: Sequence[int | None], layout: str) -> None:
    """`t` has the expected shape (None: any size on that axis); the message shows `layout`.

    Sizes are compared with `!=` only (no hashing), so symbolic sizes stay symbolic.
    """
    if t.dim() != len(expected) or any(e is not None and s != e for s, e in zip(t.shape, expected, strict=True)):
        want = ", ".join("*" if e is None else str(e) for e in expected)
        raise ValueError(f"tokamax {op}: {name} must be {layout} = [{want}], got shape {tuple(t.shape)}")


def same(op: str, what: str, **sizes: int) -> None:
    """The named sizes agree, e.g. same("gmm", "k", lhs=lhs.shape[1], rhs=rhs.shape[1]).

    Compared pairwise with `!=`, never hashed: a set of symbolic sizes would make torch.compile
    specialise them (one graph per size).
    """
    first, *rest = sizes.values()
    if any(size != first for size in rest):
        given = ", ".join(f"{n} has {v}" for n, v in sizes.items())
        raise ValueError(f"tokamax {op}: {what} must agree: {given}")


def choice(op: str, name: str, value: object, allowed: Sequence[object]) -> None:
    """`value` is one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"tokamax {op}: {name} must be one of {list(allowed)}, got {value!r}")


def positive(op: str, name: str, value: int | float) -> None:
    if not value > 0:
        raise ValueError(f"tokamax {op}: {name} must be positive, got {value}")


def group_sizes(op: str, sizes: torch.Tensor, groups: int) -> None:
    """int32 [groups]."""
    if sizes.dtype != torch.int32:
        raise TypeError(f"tokamax {op}: group_sizes must be int32, got {sizes.dtype}")
    if sizes.dim() != 1 or sizes.shape[0] != groups:
        raise ValueError(f"tokamax {op}: group_sizes must have one entry per group ({groups}), "
                         f"got shape {tuple(sizes.shape)}")
