"""What a JAX call runs where no TPU is attached, and saying so once.

A JAX user on a CPU machine copies a block from the docs: the package's own ops (the LM head, the LM
loss, distillation, splash, ring) have no path but their Pallas TPU kernels, so where JAX's default
backend is the CPU and the caller chose nothing, they run them in Pallas TPU interpret mode for the
chip `emulation.cpu_chip()` names (`TOKAMAX_CPU_CHIP`, default v6e: what the Torch ops do for CPU
tensors), with upstream's device check skipped as inside the Torch ops. Upstream's public ops keep
upstream's choice there (its XLA fallback). Each says which path ran, once per process per op, as an
`emulation.EmulationWarning` (a `UserWarning`: shown by default; `warnings.filterwarnings("ignore",
category=tokamax.emulation.EmulationWarning)` hides it).

The caller chose when: JAX sees a TPU; an emulation block is open (`emulation.interpret_on_cpu` /
`emulated_chip`: the Torch ops, the compile tier and tests open one); or a TPU mesh is set (lowering for
a TPU: `use_abstract_mesh(emulation.tpu_mesh(chip))`, `jax.set_mesh` over a topology's devices). Then
nothing changes and nothing is said.

Interpret mode and the chip are read when a kernel is traced, not when it is lowered, so the block is
entered around the traced body: a caller's `jax.jit` around an op works, and a custom VJP's backward
(traced later, by `jax.grad`, outside the forward's call) carries the decorator too.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np

from . import emulation

F = TypeVar("F", bound=Callable[..., Any])


_SAID: set[str] = set()  # ops that said which path they took


def forget() -> None:
    """Say again (tests: each docs block shows what its own run said)."""
    _SAID.clear()


def _say(op: str, message: str) -> None:
    if op in _SAID:
        return
    _SAID.add(op)
    warnings.warn(message, emulation.EmulationWarning, stacklevel=3)


def chip_to_emulate() -> str | None:
    """The chip a call traced here must emulate itself, or None where the caller's setting already says where
    kernels run (a TPU, an emulation block, a TPU mesh set for lowering)."""
    if jax.default_backend() != "cpu" or emulation.current_chip() is not None:
        return None
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else getattr(mesh, "abstract_device", None)
    if device is not None and device.platform == "tpu":
        return None
    return emulation.cpu_chip()


def chosen() -> bool:
    """Whether the caller's setting already says where kernels run (a TPU, an emulation block, a TPU mesh)."""
    return chip_to_emulate() is None


def _cross_compile() -> Any:
    """Upstream's option that lets its Op's Mosaic path trace on a CPU host (as the Torch ops set it)."""
    return importlib.import_module("._ported._src.config", __package__).cross_compile


def on_tpus(mesh: Any) -> bool:
    """Whether a mesh's devices are TPU chips (a real mesh on a TPU host, torch-tpu's compile-only devices its
    exports trace over on a host where JAX sees no TPU, or an abstract mesh of TPUs: `emulation.tpu_mesh`): a
    function run over it is traced for the chips."""
    if isinstance(mesh, jax.sharding.AbstractMesh):  # no devices, perhaps an abstract device
        device = getattr(mesh, "abstract_device", None)
    else:
        device = next(iter(np.asarray(mesh.devices).flat), None)
    return device is not None and (getattr(device, "platform", "") == "tpu"
                                   or str(getattr(device, "device_kind", "")).startswith("TPU"))


def emulated(op: str, mesh: Any = None) -> Callable[[F], F]:
    """For the package's own ops: on a host without a TPU where the caller chose nothing, the call runs in
    `emulation.interpret_on_cpu(emulation.cpu_chip())`, saying so once for `op` (a forward and its backward
    name the same op, so they say it once). A function that runs over `mesh` (ring attention's `shard_map`) is
    left as it is where that mesh's devices are TPUs (`on_tpus`)."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            chip = None if mesh is not None and on_tpus(mesh) else chip_to_emulate()
            if chip is None:
                return fn(*args, **kwargs)
            _say(op, f"tokamax {op}: no TPU attached (JAX's default backend is the CPU), so its Pallas TPU kernels "
                     f"run in interpret mode on the CPU, emulating a {chip}: slow, for checking numerics. Set "
                     f"{emulation.CPU_CHIP_VARIABLE} (one of {sorted(emulation.CHIPS)}) to emulate another chip, or "
                     f"call inside tokamax.emulation.interpret_on_cpu(chip) to choose it and silence this")
            with emulation.interpret_on_cpu(chip), _cross_compile()(True):
                return fn(*args, **kwargs)
        return wrapped  # type: ignore[return-value]
    return decorate


def _asks_mosaic(implementation: Any) -> bool:
    """An `implementation=` that names a kernel first (a Mosaic name, an Op), not upstream's "xla"."""
    if implementation is None:
        return False
    if isinstance(implementation, (list, tuple)):
        return bool(implementation) and _asks_mosaic(implementation[0])
    return implementation != "xla"


def upstream_on_cpu(op: str, fallback: str) -> Callable[[F], F]:
    """For upstream's public ops on a host without a TPU where the caller chose nothing (no emulation block, no
    `cross_compile`): with `implementation=None` upstream runs its XLA fallback (`fallback`), and this says so
    once for `op`, after the call, with how to run the Mosaic kernel instead; an `implementation=` that asks for
    a kernel (a Mosaic name or Op first) runs it as the package's own ops run theirs (`emulated`), saying so."""
    def decorate(fn: F) -> F:
        in_emulation = emulated(op)(fn)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if chosen() or _cross_compile().value:
                return fn(*args, **kwargs)
            if _asks_mosaic(kwargs.get("implementation")):
                return in_emulation(*args, **kwargs)
            out = fn(*args, **kwargs)
            if kwargs.get("implementation") is None:
                _say(f"{op} (XLA)", f"tokamax {op}: no TPU attached (JAX's default backend is the CPU), so upstream's "
                     f"XLA fallback ran ({fallback}), not the Mosaic TPU kernel. To run the kernel in Pallas TPU "
                     "interpret mode (slow, for checking numerics), pass implementation=\"mosaic\", or call inside "
                     "`with tokamax.emulation.interpret_on_cpu(chip), tokamax.ops.config.cross_compile(True):`")
            return out
        return wrapped  # type: ignore[return-value]
    return decorate
