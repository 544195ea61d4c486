"""One call spec per exposed kernel, shared by every kind of check on CPU.

A `Case` says how to call one kernel entry point on small, deterministic inputs, given a
resolver from module paths (relative to the package root, e.g.
`_src.ops.topk.pallas_mosaic_tpu_kernel`) to modules. The same case runs against this kernel
(`<kernel id>._ported`) and against upstream tokamax 0.0.17 (`tokamax`), whose layouts match:

- interpret-mode numerics: `call` under `emulation.interpret_on_cpu(interpret_chip)`, against
  `reference` (upstream's pure-JAX reference or one written in the test), within `tolerance`;
- TPU lowering for every chip in `chips`;
- Mosaic identity: the serialized Mosaic bodies of our lowering equal upstream's.

Cases import nothing but numpy and jax, so that the upstream venv can load them too.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

Resolver = Callable[[str], ModuleType]


@dataclasses.dataclass(frozen=True)
class Case:
    """How to call one kernel, and how to check it."""

    id: str  # "<op>/<variant>", unique
    call: Callable[[Resolver], Callable[..., Any]]  # modules -> fn(*inputs) running the kernel (static args bound)
    inputs: Callable[[], tuple[np.ndarray, ...]]  # small deterministic inputs
    reference: Callable[[Resolver], Callable[..., Any]] | None = None  # modules -> fn(*inputs) -> expected
    tolerance: tuple[float, float] = (0.0, 0.0)  # (rtol, atol) for the interpret-mode comparison
    tolerance_why: str = ""  # why that tolerance fits the dtypes and the arithmetic
    # compiled on a TPU (tools/chip check), where it differs from the interpreter's: f32 matmuls at the default
    # precision run as one bf16 pass on the MXU (each operand rounded to 8 significant bits)
    chip_tolerance: tuple[float, float] | None = None
    chip_tolerance_why: str = ""
    chips: tuple[str, ...] = ("v5e", "v6e")  # chips the kernel supports, for lowering and identity
    interpret_chip: str = "v6e"  # chip that tiling code sees in interpret mode
    interpret_xfail: str | None = None  # why JAX's interpreter cannot run it (recorded as xfail)
    # with it, what the interpreter raises: (exception type, a fragment of its message)
    interpret_raises: tuple[type[BaseException], str] | None = None
    compare: Callable[[Any, Any], None] | None = None  # custom comparison instead of allclose
    mesh: tuple[str, int] = ("x", 1)  # (axis, devices) of the abstract TPU mesh it is lowered under
    numerics_in: str | None = None  # where its numerics are checked instead (e.g. needs several devices)


def resolver(root: str) -> Resolver:
    """Modules under `root` (`tokamax` upstream, `<kernel id>._ported` here) by relative path."""
    return lambda path: importlib.import_module(f"{root}.{path}")


def rng(seed: int) -> np.random.Generator:
    """The inputs' random source: fixed seeds, so both sides see the same arrays."""
    return np.random.default_rng(seed)


def on_tensorcores(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Runs `fn` under a one-core abstract CPU mesh when no mesh is set (interpret mode on CPU).

    Kernels that build `pltpu.TensorCoreMesh` / `create_tensorcore_mesh()` read `num_cores` from
    the abstract mesh's device, else from `jax.devices()[0]`; a CPU device has none
    (AttributeError), which would hide the interpreter's real limits. The mesh is set while the
    kernel is traced only. When lowering for TPU the abstract TPU mesh is set and this does nothing.
    """

    def wrapped(*args: Any) -> Any:
        import jax

        if not jax.sharding.get_abstract_mesh().empty:
            return fn(*args)
        device = jax.sharding.AbstractDevice(device_kind="cpu", num_cores=1, platform="cpu")
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)):
            return fn(*args)

    return wrapped


def all_cases() -> list[Case]:
    """Every case of every op module in this package."""
    out: list[Case] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(module.CASES)
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), f"duplicate case ids: {ids}"
    return out
