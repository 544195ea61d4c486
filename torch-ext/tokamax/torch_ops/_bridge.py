"""How every Torch op here is made: torch-tpu's `jax_op` in this build's namespace, a CPU kernel
that runs the JAX function in Pallas TPU interpret mode, and the chip that tiling code sees.

- TPU tensors: `jax_op` runs the JAX function on the TPU.
- CPU tensors: the CPU kernel hands the tensors to JAX through DLPack (no copy), runs the function
  in interpret mode for the chip `emulation.cpu_chip()` names (or the op's own chip, for ops
  upstream runs on one chip only), and hands the result back the same way. For checking numerics;
  slow. Ops that JAX's interpreter cannot run say so, and why, instead.
- meta / fake tensors: each op module registers a fake kernel that takes symbolic sizes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import torch
from torch.tpu.pallas import jax_op  # torch-tpu; `import torch` loads it

from .. import emulation, ops
from .._ops import add_op_namespace_prefix

# Where the Mosaic kernel refuses a ragged dot, upstream falls back to XLA's; torch-tpu's compiler
# does not take XLA's ragged-dot instruction, so (as upstream's Torch ops do) JAX expands it instead.
jax.config.update("jax_ragged_dot_use_ragged_dot_instruction", False)


def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A CPU tensor as a JAX array over the same memory (DLPack; contiguous tensors are not copied)."""
    return jax.dlpack.from_dlpack(tensor.detach().contiguous())


def to_torch(array: jax.Array) -> torch.Tensor:
    """A JAX CPU array as a tensor over the same memory (DLPack)."""
    return torch.from_dlpack(array)


def _cpu_kernel(jax_fn: Callable[..., Any], chip: str | None) -> Callable[..., Any]:
    """The CPU implementation of an op: DLPack in, the function in interpret mode, DLPack out."""
    jitted: dict[tuple, Callable[..., Any]] = {}

    def kernel(*args: Any) -> Any:
        statics = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor) and a is not None)
        if statics not in jitted:
            jitted[statics] = jax.jit(jax_fn, static_argnums=tuple(i for i, _ in statics))
        arrays = [to_jax(a) if isinstance(a, torch.Tensor) else a for a in args]
        with emulation.interpret_on_cpu(chip or emulation.cpu_chip()), ops.config.cross_compile(True):
            out = jitted[statics](*arrays)
        return jax.tree.map(to_torch, out)

    return kernel


def register(name: str, jax_fn: Callable[..., Any], *, no_cpu: str | None = None, chip: str | None = None) -> Any:
    """The custom op `name` in this build's namespace, made from the annotated JAX function.

    CPU tensors run it in interpret mode (as `chip`, default `emulation.cpu_chip()`), unless
    `no_cpu` says why JAX's interpreter cannot; then a CPU call raises NotImplementedError with
    that reason.
    """
    op = jax_op(add_op_namespace_prefix(name), jax_fn)
    if no_cpu is None:
        op.register_kernel("cpu", _cpu_kernel(jax_fn, chip))
    else:
        def refuse(*args: Any) -> Any:
            raise NotImplementedError(f"tokamax {name} runs on TPU only: JAX's Pallas TPU interpreter cannot "
                                      f"run it on CPU ({no_cpu}); lower it for TPU instead")
        op.register_kernel("cpu", refuse)
    return op


def chip_for_tracing(chip: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Lets tiling code ask for chip info while tracing on a host without a TPU (fake tensors, CPU).

    On a TPU host the real chip answers; the emulated one (`chip`, default `emulation.cpu_chip()`)
    only stands in for CPU devices.
    """
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with emulation.emulated_chip(chip or emulation.cpu_chip()):
                return fn(*args, **kwargs)
        return wrapped
    return decorate
