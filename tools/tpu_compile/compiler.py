"""Compiling a case for its chip or pod, and what the compiler reports back.

A case ends in one of four ways: `compiled`; `refused` (the kernel raised while the call was traced,
before the compiler saw it); `compiler-error` (libtpu refused what the kernel accepted: VMEM, SMEM,
layouts, HBM); `error` (anything else in tracing, a bug in the case or the kernel).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import jax
import numpy as np

from . import topology
from .case import Case

# Names in the scheduled HLO worth counting: the kernels and the collectives.
_COUNTED = ("tpu_custom_call", "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


@dataclasses.dataclass
class Outcome:
    name: str
    status: str  # compiled | refused | compiler-error | error
    message: str = ""
    seconds: float = 0.0
    memory: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes per chip
    cost: dict[str, float] = dataclasses.field(default_factory=dict)
    hlo: dict[str, int] = dataclasses.field(default_factory=dict)  # counts in the scheduled HLO
    largest: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes of each collective's largest array

    def row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _memory(compiled: Any) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {k: int(getattr(m, f"{k}_size_in_bytes")) for k in ("argument", "output", "temp", "generated_code")}


def _cost(compiled: Any) -> dict[str, float]:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return {k: float(cost[k]) for k in ("flops", "transcendentals", "bytes accessed", "optimal_seconds")
            if cost and k in cost}


def hlo_counts(text: str) -> dict[str, int]:
    """Kernel calls and collectives (their start ops, or the synchronous op) in a scheduled HLO."""
    counts = {}
    for name in _COUNTED:
        if name == "tpu_custom_call":
            n = len(re.findall(r'custom_call_target="tpu_custom_call"', text))
        else:
            # the result is one array, or a tuple of them (an async start: "(bf16[...], ..., u32[]) name-start(")
            n = len(re.findall(rf"= (?:\(.*?\)|\S+) {name}(?:-start)?\(", text))
        counts[name] = n
    return counts


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8}


def largest_collectives(text: str) -> dict[str, int]:
    """Per collective, the bytes of the largest array any of its ops returns (0 where there is none):
    what tells a ring's K/V block passing from a gather of the whole K/V."""
    out = {}
    for name in _COUNTED[1:]:
        biggest = 0
        for result in re.findall(rf"= (.*?) {name}(?:-start)?\(", text):
            for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", result):
                if dtype in _BYTES:
                    biggest = max(biggest, _BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d])))
        out[name] = biggest
    return out


@contextlib.contextmanager
def tracing_for(kernel: ModuleType, chip: str) -> Iterator[None]:
    """Upstream's Op skips its device check (the host is a CPU) and tiling code is told the chip."""
    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip(chip):
        yield


def lower(case: Case, kernel: ModuleType) -> Any:
    """The case traced and lowered for its topology (raises what the kernel raises)."""
    mesh = topology.mesh(case.target, case.axes, case.mesh_shape)
    with tracing_for(kernel, topology.chip(case.target)), jax.set_mesh(mesh):
        fn, specs = case.build(kernel, mesh)
        return jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",))


def compile_case(case: Case, kernel: ModuleType) -> Outcome:
    """Compiles `case` and reads back per-chip memory, cost and the scheduled HLO's counts."""
    start = time.perf_counter()
    try:
        lowered = lower(case, kernel)
    except Exception as e:  # noqa: BLE001 - told apart by the caller against the case's expectation
        status = "refused" if _from_kernel(e) else "error"
        return Outcome(case.name, status, f"{type(e).__name__}: {e}", time.perf_counter() - start)
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - libtpu's refusal, reported as such
        return Outcome(case.name, "compiler-error", f"{type(e).__name__}: {e}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    text = compiled.as_text()
    return Outcome(case.name, "compiled", "", seconds, _memory(compiled), _cost(compiled), hlo_counts(text),
                   largest_collectives(text))


def _from_kernel(error: BaseException) -> bool:
    """A refusal of ours names the kernel (`tokamax ...`) in a ValueError or NotImplementedError."""
    return isinstance(error, (ValueError, NotImplementedError, TypeError)) and "tokamax" in str(error).lower()
