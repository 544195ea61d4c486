"""The chip a call is explained for, and tracing for it: the attached TPU by default, a chip named on a CPU host
(the package's emulation: `get_tpu_info()` and upstream's tuned-table lookup see that chip, as when lowering for
it), and shapes read from JAX arrays, `jax.ShapeDtypeStruct`s or Torch tensors alike."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from .. import emulation, ops


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def spec(x: Any) -> Any:
    """`x` as a `jax.ShapeDtypeStruct` where it is an array (JAX, NumPy or Torch), else as it is: the choices read
    shapes and dtypes only, and a concrete array on the host's CPU would make upstream's table lookup ask for "cpu"."""
    if x is None or isinstance(x, jax.ShapeDtypeStruct) or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return x
    dtype = str(x.dtype).removeprefix("torch.") if _is_torch(x) else x.dtype
    return jax.ShapeDtypeStruct(tuple(x.shape), jnp.dtype(dtype))


def _attached() -> str | None:
    """The chip JAX runs on, or None on a host without a TPU."""
    device = jax.devices()[0]
    if device.platform != "tpu":
        return None
    for name, (kind, _) in emulation.CHIPS.items():
        if device.device_kind == kind:
            return name
    raise ValueError(f"tokamax explain: the attached TPU ({device.device_kind!r}) is none of the package's chips "
                     f"({sorted(emulation.CHIPS)})")


def resolve(chip: str | None, args: tuple) -> str:
    """The chip to explain for: `chip`, else the attached TPU, else the chip an enclosing `emulation` block emulates,
    else for Torch tensors the chip the Torch ops emulate on CPU (`emulation.cpu_chip()`); refused on a CPU host
    with none of these."""
    if chip is not None:
        if not isinstance(chip, str) or chip not in emulation.CHIPS:
            raise ValueError(f"tokamax explain: chip must be one of {sorted(emulation.CHIPS)} or None (the attached "
                             f"TPU), got {chip!r}")
        return chip
    found = _attached() or emulation.current_chip()
    if found is None and any(_is_torch(a) for a in jax.tree.leaves(args, is_leaf=_is_torch)):
        found = emulation.attached_chip() or emulation.cpu_chip()
    if found is None:
        raise ValueError(f"tokamax explain: no TPU is attached; name the chip to explain for, e.g. chip=\"v5e\" "
                         f"(one of {sorted(emulation.CHIPS)})")
    return found


@contextlib.contextmanager
def tracing_for(chip: str) -> Iterator[None]:
    """Within the block the choices are made as when the call is traced for `chip`: on its own TPU as it is; on a
    CPU host as when lowering for it (`get_tpu_info()` answering for it, upstream's Op without its device check,
    an abstract mesh of that chip for the tuned tables' device kind). A chip other than the attached one is
    refused: its figures cannot be asked of another TPU."""
    attached = _attached()
    if attached == chip:
        yield
        return
    if attached is not None:
        raise ValueError(f"tokamax explain: chip={chip!r} on a {attached} host: explain the attached chip "
                         f"(chip=None) or name another on a CPU host")
    with ops.config.cross_compile(True), emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        yield


def device_kind(chip: str) -> str:
    return emulation.CHIPS[chip][0]
