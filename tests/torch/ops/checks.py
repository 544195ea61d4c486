"""Checks every Torch op's tests share: namespace, fake shapes against JAX's own shape inference,
symbolic-size tracing, one compiled graph for two sizes, the public Op (or the Mosaic kernel count)
in the TPU lowering, and the clear refusal on CPU of ops JAX's interpreter cannot run.

Fake kernels are hand-written per op; `fake_matches_jax` holds them to `jax.eval_shape` of the JAX
function the op runs, at concrete sizes, so a wrong fake shows up without a TPU.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import jax
import numpy as np
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from tests.jax.cases import rng


class OpsSeen(TorchDispatchMode):
    """Counts the ops a block dispatches, by their names without the namespace (`seen`): which custom ops a call
    and its backward ran."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.seen[func.name().split("::")[-1]] += 1
        return func(*args, **(kwargs or {}))


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal samples (numpy's generator, as the JAX-side cases use)."""
    return torch.from_numpy(rng(seed).standard_normal(shape).astype("float32") * scale).to(dtype)


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A meta tensor (no data): for argument checks and fake kernels."""
    return torch.zeros(*shape, dtype=dtype, device="meta")


def replaced(tensors: Sequence[torch.Tensor], index: int, tensor: torch.Tensor) -> list[torch.Tensor]:
    """`tensors` with the one at `index` replaced: a good call made bad in one argument."""
    return [tensor if i == index else t for i, t in enumerate(tensors)]


def family(ops: ModuleType, name: str) -> ModuleType:
    """The op-family module `name` of the loaded kernel's torch_ops."""
    return ops.families[name]


def assert_in_build_namespace(tokamax: ModuleType, *custom_ops: Any) -> None:
    """Each custom op's name carries this build's namespace (kernel-builder's `_ops.py`)."""
    names = importlib.import_module(f"{tokamax.__name__}._ops")
    for op in custom_ops:
        assert op._qualname.split("::")[0] == names._OPS_NAME, op._qualname


def _specs(args: Sequence[Any]) -> list[Any]:
    def spec(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return jax.ShapeDtypeStruct(tuple(a.shape), np.dtype(str(a.dtype).removeprefix("torch."))
                                        if a.dtype != torch.bfloat16 else jax.numpy.bfloat16)
        return a
    return [spec(a) for a in args]


def fake_matches_jax(ops: ModuleType, custom_op: Any, jax_fn: Callable[..., Any], *args: Any,
                     chip: str = "v6e") -> Any:
    """Calls `custom_op` on fake copies of `args` and asserts its output shapes and dtypes equal
    `jax.eval_shape(jax_fn, ...)` under the emulated `chip` (with `cross_compile`, as the CPU kernel
    runs). Returns the fake outputs."""
    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        out = custom_op(*fakes)
    statics = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor) and a is not None]
    package = ops.__name__.rsplit(".", 1)[0]
    emulation = importlib.import_module(f"{package}.emulation")
    # cross_compile: upstream's Ops refuse the CPU device otherwise ("Not supported on cpu").
    with emulation.emulated_chip(chip), importlib.import_module(f"{package}.ops").config.cross_compile(True):
        want = jax.eval_shape(functools.partial(_call_with_statics, jax_fn, statics, args), *[
            s for i, s in enumerate(_specs(args)) if i not in statics])
    got_leaves = jax.tree.leaves(out if isinstance(out, (tuple, list)) else (out,))
    want_leaves = jax.tree.leaves(want)
    got = [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in got_leaves]
    expected = [(tuple(s.shape), str(s.dtype)) for s in want_leaves]
    assert got == expected, f"fake kernel gives {got}, the JAX function {expected}"
    return out


def _call_with_statics(fn: Callable[..., Any], statics: list[int], args: Sequence[Any], *dynamic: Any) -> Any:
    it = iter(dynamic)
    return fn(*[args[i] if i in statics else next(it) for i in range(len(args))])


def traces_symbolically(fn: Callable[..., Any], *args: Any) -> torch.fx.GraphModule:
    """make_fx with symbolic sizes through `fn` (which calls the op): the fake kernels must take SymInts.
    Returns the graph, whose output sizes are expressions in the input sizes."""
    graph = make_fx(fn, tracing_mode="symbolic")(*args)
    outputs = [n for n in graph.graph.nodes if n.op == "output"][0].args[0]
    sizes = [s for n in jax.tree.leaves(outputs) if hasattr(n, "meta") and "val" in n.meta
             for s in n.meta["val"].shape]
    assert any(isinstance(s, torch.SymInt) for s in sizes), f"no symbolic output size in {sizes}"
    return graph


def compiles_once_for_two_sizes(fn: Callable[..., Any], small: Sequence[Any], large: Sequence[Any]
                                ) -> CompileCounterWithBackend:
    """torch.compile(fn, dynamic=True, fullgraph=True) called with two argument sets that differ in
    size: one graph (no recompilation), no graph break at the ops (fullgraph). Pass meta tensors for
    TPU-only ops: the fake kernels then stand in for the kernel."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, backend=counter, dynamic=True, fullgraph=True)
    try:
        compiled(*small)
        compiled(*large)
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times for two sizes"
    return counter


_PAYLOAD_TYPE = re.compile(r"\\22__type\\22:\\22[A-Za-z0-9_.]*?\.([A-Za-z0-9_]+)\\22")


@contextlib.contextmanager
def _tracing_for_tpu(ops: ModuleType, chip: str) -> Iterator[None]:
    """What torch-tpu's export sees of the chip on this CPU host: `chip` emulated, its abstract mesh, and upstream's
    device check skipped (`cross_compile`)."""
    package = ops.__name__.rsplit(".", 1)[0]
    emulation = importlib.import_module(f"{package}.emulation")
    config = importlib.import_module(f"{package}.ops").config
    with config.cross_compile(True), emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        yield


def _traced(jax_fn: Callable[..., Any], args: tuple) -> tuple[Callable[..., Any], list[Any]]:
    """`jax_fn` under `jax.jit` with the non-tensor `args` bound, and the tensors' shapes to trace it with."""
    statics = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor) and a is not None]
    return (jax.jit(functools.partial(_call_with_statics, jax_fn, statics, args)),
            [s for i, s in enumerate(_specs(args)) if i not in statics])


def tpu_lowering(ops: ModuleType, jax_fn: Callable[..., Any], *args: Any, chip: str = "v6e") -> str:
    """StableHLO text of the op's JAX function lowered for TPU on this CPU host (emulated `chip`,
    abstract mesh, `cross_compile`), tensors in `args` as shapes, the rest static."""
    with _tracing_for_tpu(ops, chip):
        fn, specs = _traced(jax_fn, args)
        return fn.trace(*specs).lower(lowering_platforms=("tpu",)).as_text()


def tpu_export(ops: ModuleType, jax_fn: Callable[..., Any], *args: Any, chip: str = "v6e") -> str:
    """StableHLO text of the op's JAX function exported for TPU as torch-tpu's `jax_op` exports it
    (`jax.export`, platforms ["tpu"], custom calls unchecked), under `tpu_lowering`'s emulation."""
    with _tracing_for_tpu(ops, chip):
        fn, specs = _traced(jax_fn, args)
        exported = jax.export.export(fn, platforms=["tpu"],
                                     disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("ALL")])(*specs)
        return exported.mlir_module()


def public_op_classes(ops: ModuleType, jax_fn: Callable[..., Any], *args: Any, chip: str = "v6e") -> set[str]:
    """The upstream Op classes the profiling payloads of the op's TPU lowering name: proof that the
    Torch op runs upstream's public Op (its config choice), not a raw kernel. Asserts a Mosaic kernel
    is in the module."""
    text = tpu_lowering(ops, jax_fn, *args, chip=chip)
    assert "tpu_custom_call" in text, "no Mosaic kernel in the TPU lowering"
    return set(_PAYLOAD_TYPE.findall(text))


def mosaic_kernels(ops: ModuleType, jax_fn: Callable[..., Any], *args: Any, chip: str = "v6e") -> int:
    """How many Mosaic kernel calls the op's TPU lowering holds."""
    return tpu_lowering(ops, jax_fn, *args, chip=chip).count("@tpu_custom_call(")


def refuses_on_cpu(call: Callable[[], Any], op: str) -> None:
    """A CPU call of a TPU-only op raises NotImplementedError naming the op and the interpreter's limit."""
    try:
        call()
    except NotImplementedError as e:
        assert f"tokamax {op} runs on TPU only" in str(e) and "interpreter cannot" in str(e), str(e)
    else:
        raise AssertionError(f"{op} ran on CPU; it was registered as TPU-only")
