"""How every Torch op here is made: torch-tpu's `jax_op` in this build's namespace, a CPU kernel
that runs the JAX function in Pallas TPU interpret mode, and the chip that tiling code sees.

- TPU tensors: `jax_op` exports the JAX function for the TPU and runs it there. torch-tpu owns the
  TPU, so JAX itself sees no TPU device (its exports are compile-only): `chip_for_tracing` tells
  tiling code and upstream's table lookup which chip torch-tpu runs on (`attached_chip`), and lets
  upstream's Op skip its device check (`cross_compile`), as upstream's own Torch wrappers do by
  calling the Op's `_fwd`.
- CPU tensors: the CPU kernel hands the tensors to JAX through DLPack (no copy), runs the function
  in interpret mode for the chip `emulation.cpu_chip()` names (or the op's own chip, for ops
  upstream runs on one chip only), and hands the result back the same way. For checking numerics;
  slow. Ops that JAX's interpreter cannot run say so, and why, instead.
- meta / fake tensors: each op module registers a fake kernel that takes symbolic sizes.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable
from typing import Any

import jax
import torch
from torch.tpu.pallas import jax_op  # torch-tpu; `import torch` loads it

from .. import emulation, ops
from .._ops import add_op_namespace_prefix
from ..emulation import attached_chip
from . import _tuned

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
    """The CPU implementation of an op: DLPack in, the function in interpret mode, DLPack out.
    (`chip_for_tracing` on the function sees the chip set here and turns `cross_compile` on.)"""
    jitted: dict[tuple, Callable[..., Any]] = {}

    def kernel(*args: Any) -> Any:
        statics = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor) and a is not None)
        if statics not in jitted:
            jitted[statics] = jax.jit(jax_fn, static_argnums=tuple(i for i, _ in statics))
        arrays = [to_jax(a) if isinstance(a, torch.Tensor) else a for a in args]
        with emulation.interpret_on_cpu(chip or emulation.cpu_chip()):
            out = jitted[statics](*arrays)
        return jax.tree.map(to_torch, out)

    return kernel


def register(name: str, jax_fn: Callable[..., Any], *, no_cpu: str | None = None,
             cpu_fn: Callable[..., Any] | None = None, donate_argnums: tuple[int, ...] | None = None,
             mesh: Any = None, input_partition_specs: tuple | None = None,
             output_partition_specs: tuple | None = None) -> Any:
    """The custom op `name` in this build's namespace, made from the annotated JAX function.

    Unless the function names its own `autotuning` argument, or the op is meshed, the op takes the
    applied autotuning result (`_tuned`: a trailing static token, appended at each call).
    CPU tensors run it in interpret mode (as the chip its `chip_for_tracing` pins, default
    `emulation.cpu_chip()`), or run `cpu_fn` instead (same arguments and outputs: e.g. upstream's
    pure-JAX reference where JAX's interpreter cannot run the kernel), unless `no_cpu` says why
    neither can; then a CPU call raises NotImplementedError with that reason. `donate_argnums`:
    arguments whose TPU buffers the kernel may reuse for its outputs (torch-tpu's `jax_op`; the
    tensors passed there are invalid after the call). `mesh` and the partition specs: torch-tpu's
    multi-chip `jax_op` (the function holds its own `shard_map` over that mesh).
    """
    distributed = {} if mesh is None else dict(mesh=mesh, input_partition_specs=input_partition_specs,
                                               output_partition_specs=output_partition_specs)
    names_token = _tuned.takes_token(jax_fn)
    tuned = mesh is None and not names_token  # the autotuning token appended (`_tuned`)
    if tuned:
        jax_fn = _tuned.with_token(name, jax_fn, chip_for_tracing)
        cpu_fn = None if cpu_fn is None else _tuned.with_token(name, cpu_fn, chip_for_tracing)
    op = jax_op(add_op_namespace_prefix(name), jax_fn, donate_argnums=donate_argnums, **distributed)
    if no_cpu is None:
        cpu = jax_fn if cpu_fn is None else cpu_fn
        op.register_kernel("cpu", _cpu_kernel(cpu, getattr(cpu, "pinned_chip", None)))
    else:
        def refuse(*args: Any) -> Any:
            raise NotImplementedError(f"tokamax {name} runs on TPU only: JAX's Pallas TPU interpreter cannot "
                                      f"run it on CPU ({no_cpu}); lower it for TPU instead")
        op.register_kernel("cpu", refuse)
    if mesh is not None:
        return op
    return _tuned.TunedOp(op, name, jax_fn, appends=tuned)


def upstream_chips(upstream: str) -> tuple[str, ...]:
    """The chips upstream's Pallas class `upstream` (a name in `ops.tpu`) runs on: its own `supported_on`, asked of
    a stand-in TPU device while each chip answers `get_tpu_info()` (generation, SparseCore)."""
    cls = getattr(ops.tpu, upstream)
    chips = []
    for chip in sorted(emulation.CHIPS):
        with emulation.emulated_chip(chip):
            if cls().supported_on(types.SimpleNamespace(platform="tpu", device_kind=chip)):
                chips.append(chip)
    return tuple(chips)


def chip_for_tracing(chip: str | None = None, *, upstream: str | None = None,
                     op: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Tells tiling code and upstream's Op which TPU chip the JAX function is traced for.

    Where JAX sees a TPU, that chip answers and nothing changes. Elsewhere (torch-tpu's compile-only
    exports, CPU tensors, fake tensors) upstream's Op may skip its device check (`cross_compile`) and
    the chip is, in order: the one an enclosing block already emulates (the CPU kernel's, a test's),
    the one torch-tpu runs on (`attached_chip`), `chip` (an op upstream runs on one chip only), or
    `emulation.cpu_chip()`. When torch-tpu's TPU is the answer (its export for the TPU), the chip's
    abstract mesh is set too, so upstream's Op finds that chip's autotuning table, and an op upstream
    runs on `chip` only is refused on another TPU, as upstream's device check would. `upstream` (its
    Pallas class in `ops.tpu`) and `op` (the name a refusal gives): the same for an op upstream runs on
    some chips, by its own `supported_on` (proj_and_save_state reached Mosaic on the v5e and failed
    there: "Regular semaphores in EnqueueDMA are not supported on this target").
    """
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if jax.default_backend() == "tpu":
                return fn(*args, **kwargs)
            emulated, attached = emulation.current_chip(), attached_chip()
            if emulated is None and attached is not None and chip is not None and attached != chip:
                # upstream's Op would refuse it (its `supported_on`), but `cross_compile` skips that check
                raise NotImplementedError(f"tokamax {fn.__name__.strip('_').removesuffix('_jax')}: upstream runs this "
                                          f"kernel on {chip} only; torch-tpu's TPU is {attached}")
            if emulated is None and attached is not None and upstream is not None:
                runs_on = upstream_chips(upstream)
                if attached not in runs_on:
                    raise NotImplementedError(f"tokamax {op or upstream}: upstream runs this kernel on "
                                              f"{', '.join(runs_on) or 'no chip this build knows'} only (its "
                                              f"`supported_on`); torch-tpu's TPU is {attached}")
            if emulated is None and attached is not None:
                emulation.answer_for_attached(attached)  # torch-tpu lowers the export after this block is left
            with contextlib.ExitStack() as stack:
                stack.enter_context(emulation.emulated_chip(emulated or attached or chip or emulation.cpu_chip()))
                stack.enter_context(ops.config.cross_compile(True))
                if emulated is None and attached is not None and jax.sharding.get_abstract_mesh().empty:
                    # torch-tpu's export for its TPU: upstream's Op reads the device kind for its table
                    # lookup from the abstract mesh (else it sees JAX's CPU and takes its heuristics).
                    stack.enter_context(jax.sharding.use_abstract_mesh(emulation.tpu_mesh(attached)))
                return fn(*args, **kwargs)
        wrapped.pinned_chip = chip  # read by `register` for the CPU kernel
        # read by `_tuned.with_token`, whose own block (opened first) would otherwise hide the attached chip
        wrapped.upstream_check = (upstream, op)
        return wrapped
    return decorate
