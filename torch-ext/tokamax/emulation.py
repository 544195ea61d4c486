"""Run or lower the TPU kernels on a host without a TPU, for a TPU chip you name.

Tiling code asks `pltpu.get_tpu_info()` which chip it runs on; on a CPU host that raises. Here
the chip is always chosen explicitly, never guessed from the host:

- `interpret_on_cpu(chip)` runs every Pallas call traced inside it in Pallas TPU interpret
  mode on the CPU, with `get_tpu_info()` answering for `chip`. For checking numerics; slow.
  Upstream's tuned-table lookup takes the chip's device kind from `current_chip()` where a call
  traced here finds no device and no mesh (port.kdl patches its `infer_device_kind`), as the
  compile tier's topology mesh gives it: the emulation runs the tiles, blocks and schemes the chip
  would run, not the CPU's (`emulated_chip` alone too).
  JAX's interpreter (jax 0.10 and 0.12) refuses a `jax.vmap`-ed kernel that names its grid's
  dimension semantics (the batch adds a leading grid dimension the names do not cover); Mosaic's
  own lowering marks such dimensions parallel, and so does the interpreter inside this block.
- `interpret_unless_tpu(chip=None)`: nothing on a TPU, else `interpret_on_cpu(chip or cpu_chip())` (a block
  of raw kernel calls that runs as written on both).
- `tpu_mesh(chip)` is an abstract mesh for lowering for TPU on a CPU host:
  `with jax.sharding.use_abstract_mesh(tpu_mesh("v6e")): jax.jit(f).trace(*specs).lower(
  lowering_platforms=("tpu",))`.

- `cpu_chip()` is the chip emulated where nothing else names one (the Torch ops for CPU tensors, the JAX
  ops of this package on a host without a TPU: `tokamax.hosts`): `TOKAMAX_CPU_CHIP`, else "v6e".
- `EmulationWarning`: what those JAX ops say, once each, about the path they took on such a host.
- `attached_chip()` is the chip torch-tpu runs on in this process, if any (the Torch ops trace for it;
  tuning refuses to time candidates with JAX where torch-tpu holds the chip); `answer_for_attached(chip)` has
  `get_tpu_info()` describe it for lowerings outside any block (torch-tpu's exports lower after the trace).

Chips: "v5e", "v5p", "v6e", "v7x". JAX keeps the chip table in a private module; it is reached through
the function `pltpu.get_tpu_info` itself, so that both jax 0.10 and 0.12 work.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

# chip -> (device kind JAX reports for it, ChipVersion member name)
CHIPS: dict[str, tuple[str, str]] = {
    "v5e": ("TPU v5 lite", "TPU_V5E"),
    "v5p": ("TPU v5", "TPU_V5P"),
    "v6e": ("TPU v6 lite", "TPU_V6E"),
    "v7x": ("TPU7x", "TPU_7X"),
}
DEFAULT_CHIP = "v6e"
CPU_CHIP_VARIABLE = "TOKAMAX_CPU_CHIP"


class EmulationWarning(UserWarning):
    """Says which path a call took on a host without a TPU (once per process per op; `tokamax.hosts`)."""


def _check(chip: str) -> None:
    if chip not in CHIPS:
        raise ValueError(f"unknown TPU chip {chip!r}; choose one of {sorted(CHIPS)}")


def cpu_chip() -> str:
    """The chip emulated when the Torch ops run on CPU tensors (`TOKAMAX_CPU_CHIP`, default v6e)."""
    chip = os.environ.get(CPU_CHIP_VARIABLE, DEFAULT_CHIP)
    if chip not in CHIPS:
        raise ValueError(f"{CPU_CHIP_VARIABLE}={chip!r} names no known TPU chip; choose one of {sorted(CHIPS)}")
    return chip


# torch-tpu's names for the attached chip (`torch.tpu.get_device_name()`) -> the chips here.
TORCH_TPU_CHIPS = {"TPU v5e": "v5e", "TPU v5p": "v5p", "TPU v6e": "v6e", "TPU v7": "v7x"}


def attached_chip() -> str | None:
    """The TPU chip torch-tpu runs on in this process (read from the host's PCI devices, no runtime
    started), or None where torch is not imported (torch-tpu starts with it; JAX may hold the chip) or
    torch-tpu finds no TPU; a TPU that none of the chips here names is an error, not a guess. Torch
    is never imported here: the Torch ops and tuning ask alike."""
    return None if "torch" not in sys.modules else _torch_tpu_chip()


@functools.cache
def _torch_tpu_chip() -> str | None:
    tpu = getattr(sys.modules["torch"], "tpu", None)
    name = tpu.get_device_name() if tpu is not None and hasattr(tpu, "get_device_name") else "TPU"
    if name == "TPU":  # torch-tpu's answer when it finds no TPU it knows
        return None
    if name not in TORCH_TPU_CHIPS:
        raise RuntimeError(f"tokamax: torch-tpu reports {name!r}, which none of tokamax's chips "
                           f"({sorted(TORCH_TPU_CHIPS)}) names; upstream has no kernels tuned for it")
    return TORCH_TPU_CHIPS[name]


attached_chip.cache_clear = _torch_tpu_chip.cache_clear  # type: ignore[attr-defined]  # asked again (tests)


# Where JAX keeps the chip table: jax 0.12, then jax 0.10.
_TPU_INFO_MODULES = ("jax._src.tpu_info", "jax._src.pallas.mosaic.tpu_info")


@functools.cache
def _tpu_info_module() -> ModuleType:
    from jax.experimental.pallas import tpu as pltpu

    for name in _TPU_INFO_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "get_tpu_info", None) is pltpu.get_tpu_info and hasattr(module, "registry"):
            return module
    raise RuntimeError(f"this jax keeps its TPU chip table in none of {_TPU_INFO_MODULES}; update tokamax.emulation")


def _clear_cache(info: ModuleType) -> None:
    clear = getattr(info.get_tpu_info, "cache_clear", None)
    if clear is not None:
        clear()


@functools.cache
def _chip_info_factory(chip: str):  # noqa: ANN202 - () -> TpuInfo, one object per chip
    info = _tpu_info_module()
    version = getattr(info.ChipVersion, CHIPS[chip][1])
    return lambda: info.get_tpu_info_for_chip(version, 1)


@functools.cache
def _attached_info_factory(chip: str):  # noqa: ANN202 - () -> TpuInfo
    """The same answer as `_chip_info_factory(chip)`'s, from another object: `current_chip()` tells a block's chip
    from the attached one's by the factory's identity."""
    block = _chip_info_factory(chip)
    return lambda: block()


def answer_for_attached(chip: str) -> None:
    """From now on in this process, where no emulation block is open, `pltpu.get_tpu_info()` on JAX's CPU device
    describes `chip`, the TPU torch-tpu owns: its export of an op's JAX function lowers the Mosaic kernels after
    the trace has left every block (`chip_for_tracing`'s included), and a kernel under a mesh of JAX's CPU device
    (upstream's fused MoE takes a concrete mesh) would otherwise be lowered against the CPU ("Unsupported TPU device
    kind: cpu", the v5e, 2026-12-06). Blocks still answer for their own chip and restore this on exit;
    `current_chip()` stays None outside them. A no-op where something already answers for the CPU device."""
    _check(chip)
    info = _tpu_info_module()
    if info.registry.get("cpu") is None:
        info.registry["cpu"] = _attached_info_factory(chip)
        _clear_cache(info)


def forget_attached() -> None:
    """Undoes `answer_for_attached` (tests that simulate a torch-tpu host)."""
    info = _tpu_info_module()
    if any(info.registry.get("cpu") is _attached_info_factory(chip) for chip in CHIPS):
        info.registry.pop("cpu")
        _clear_cache(info)


def current_chip() -> str | None:
    """The chip an enclosing `emulated_chip` / `interpret_on_cpu` block emulates, else None."""
    factory = _tpu_info_module().registry.get("cpu")
    return next((chip for chip in CHIPS if factory is _chip_info_factory(chip)), None)


@contextlib.contextmanager
def emulated_chip(chip: str = DEFAULT_CHIP) -> Iterator[None]:
    """Within the block, `pltpu.get_tpu_info()` on a CPU device describes `chip` (one core), and upstream's Op
    keys its tuned tables by the chip's device kind where no device or mesh names one."""
    _check(chip)
    info = _tpu_info_module()
    factory = _chip_info_factory(chip)
    previous = info.registry.get("cpu")
    if previous is factory:  # already this chip (nested, or back to back): nothing to change
        yield
        return
    info.registry["cpu"] = factory
    _clear_cache(info)
    try:
        yield
    finally:
        if previous is None:
            info.registry.pop("cpu", None)
        else:
            info.registry["cpu"] = previous
        _clear_cache(info)


_INTERPRETER = "jax._src.pallas.mosaic.interpret.interpret_pallas_call"


@contextlib.contextmanager
def _vmapped_grids_parallel() -> Iterator[None]:
    """The interpreter's dimension semantics with the leading grid dimensions `jax.vmap` adds marked
    parallel (pallas_call's batching rule prepends them; Mosaic's lowering marks them parallel)."""
    interpreter = importlib.import_module(_INTERPRETER)
    original = interpreter._get_parallel_dim_semantics

    def with_vmapped_dims(mosaic_params, num_dimensions_in_grid: int) -> tuple[bool, ...]:  # noqa: ANN001
        named = tuple(original(mosaic_params, num_dimensions_in_grid))
        return (True,) * (num_dimensions_in_grid - len(named)) + named

    interpreter._get_parallel_dim_semantics = with_vmapped_dims
    try:
        yield
    finally:
        interpreter._get_parallel_dim_semantics = original


@contextlib.contextmanager
def interpret_on_cpu(chip: str = DEFAULT_CHIP) -> Iterator[None]:
    """Runs the kernels traced inside in Pallas TPU interpret mode, as if on `chip` (its `get_tpu_info()`, its
    device kind for upstream's tuned tables)."""
    from jax.experimental.pallas import tpu as pltpu

    with emulated_chip(chip), pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()), _vmapped_grids_parallel():
        yield


@contextlib.contextmanager
def interpret_unless_tpu(chip: str | None = None) -> Iterator[None]:
    """Nothing where JAX runs on a TPU; elsewhere `interpret_on_cpu(chip or cpu_chip())`. For the kernel modules'
    raw calls (`tokamax.ragged_dot.gmm`, ...), which do not enter the emulation themselves as this package's
    ops do on a host without a TPU (`tokamax.hosts`)."""
    import jax

    if jax.default_backend() == "tpu":
        yield
        return
    with interpret_on_cpu(chip or cpu_chip()):
        yield


def tpu_mesh(chip: str = DEFAULT_CHIP, axis: str = "x", devices: int = 1):  # noqa: ANN201 - an AbstractMesh
    """An abstract mesh of `devices` chips `chip` along `axis`, for lowering for TPU on a CPU host."""
    _check(chip)
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType

    # Auto axes, as on a real device mesh: shard_map then takes unsharded specs as given.
    return AbstractMesh((devices,), (axis,), axis_types=(AxisType.Auto,),
                        abstract_device=AbstractDevice(CHIPS[chip][0], 1, "tpu"))
