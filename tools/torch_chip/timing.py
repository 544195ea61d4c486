"""Timing a Torch callable on torch-tpu: the first call (tracing, export, compile and run), the median of `runs`
calls after `warmup`, each waited for with `torch.accelerator.synchronize()` (on a CPU host: nothing to wait for),
and the same calls issued back to back with one wait at the end (`pipelined_s`: what a training loop pays, where
the host runs ahead of the chip, so the per-call wait and launch latency overlap the chip's work)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Timed:
    first_s: float
    median_s: float
    min_s: float
    max_s: float
    runs: int
    pipelined_s: float | None = None  # per call, `runs` calls then one wait


def synchronize() -> None:
    import torch

    # torch.tpu.is_available() is internal to torch-tpu (it refuses other callers); torch.accelerator answers
    if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "tpu":
        torch.accelerator.synchronize()  # torch.tpu.synchronize is internal to torch-tpu too


def timed(fn: Callable[[], Any], *, runs: int = 10, warmup: int = 2) -> Timed:
    """`fn()` timed: the first call alone, then `warmup` calls, then `runs` calls, each waited for."""
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    first = time.perf_counter() - start
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    synchronize()
    pipelined = (time.perf_counter() - start) / runs
    return Timed(first, statistics.median(times), min(times), max(times), runs, pipelined)
