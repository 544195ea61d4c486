"""Timing one jitted call on the chip: compile time, the compiler's memory figures, then the median and
spread of `runs` calls after `warmup` calls, each waited for, and the same `runs` calls issued back to back with
one wait at the end (`pipelined_s`: as ops run inside a model's program, without a host's dispatch and wait per
call, which on the v5e's host is about 0.4 ms: most of a call at prefill sizes), for calls under `PIPELINED_BELOW_S`
(past it the dispatch is under 1% of a call, and the extra calls would cost the chip time for nothing)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

PIPELINED_BELOW_S = 0.05


@dataclasses.dataclass(frozen=True)
class Measured:
    median_s: float
    min_s: float
    max_s: float
    runs: int
    compile_s: float  # lowering and compiling the first call
    temp_bytes: int  # the compiler's temporaries
    peak_bytes: int  # arguments + outputs + temporaries: what the call holds in HBM at its peak
    assigned_temp_bytes: int | None = None  # the temporaries as the compiler assigned them (`assigned`)
    first_run_s: float | None = None  # the first call after the compile: with `compile_s`, a user's first call
    pipelined_s: float | None = None  # seconds a call, `runs` calls issued back to back, one wait at the end


def measure(fn: Callable[..., Any], args: tuple, *, runs: int = 10, warmup: int = 2) -> Measured:
    import jax

    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return timed(compiled, args, time.perf_counter() - start, runs=runs, warmup=warmup)


def timed(compiled: Any, args: tuple, compile_s: float, *, runs: int = 10, warmup: int = 2,
          assigned_temp: int | None = None) -> Measured:
    """`compiled(*args)` timed: `warmup` calls, then `runs` calls, each waited for; `assigned_temp`: its
    temporaries as the compiler assigned them, where read (`assigned.temp_bytes`)."""
    import jax  # here, not above: the zoo's plan reads PIPELINED_BELOW_S where JAX is absent (CI's docs)

    memory = compiled.memory_analysis()
    temp = int(getattr(memory, "temp_size_in_bytes", 0) or 0)
    peak = temp + int(getattr(memory, "argument_size_in_bytes", 0) or 0) + int(
        getattr(memory, "output_size_in_bytes", 0) or 0) - int(getattr(memory, "alias_size_in_bytes", 0) or 0)
    first = None
    for i in range(warmup):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        first = time.perf_counter() - start if i == 0 else first
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    pipelined = None
    if statistics.median(times) < PIPELINED_BELOW_S:
        start = time.perf_counter()
        for _ in range(runs):
            result = compiled(*args)  # the calls run in order on the chip: waiting for the last waits for all
        jax.block_until_ready(result)
        pipelined = (time.perf_counter() - start) / runs
    return Measured(statistics.median(times), min(times), max(times), runs, compile_s, temp, peak, assigned_temp,
                    first, pipelined)
