"""Runs workloads: compiles them all in parallel (the host's cores; each compile on a thread of its own), or a batch
of them at a time, then times them one at a time on the chip, each result appended to the run's file as soon as it
is measured."""

from __future__ import annotations

import concurrent.futures
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import jax

from . import assigned
from .measure import Measured, timed
from .workloads import Workload


def _compile(indexed: tuple[int, Workload]) -> tuple[Any, float, Any]:
    """(compiled, seconds, None) or (None, seconds, the error's last line)."""
    index, w = indexed
    start = time.perf_counter()
    try:
        fn, specs = w.make_specs()
        return jax.jit(assigned.named(fn, index)).lower(*specs).compile(), time.perf_counter() - start, None
    except Exception as e:  # noqa: BLE001 - recorded with the workload, the run goes on
        return None, time.perf_counter() - start, _last_line(e)


def _last_line(e: BaseException) -> str:
    """The exception's own last line (not a note JAX adds after it, such as its traceback filtering's)."""
    notes = {line.strip() for note in getattr(e, "__notes__", None) or () for line in str(note).splitlines()}
    lines = [line for line in "".join(traceback.format_exception_only(e)).splitlines()
             if line.strip() and line.strip() not in notes]
    return (lines[-1] if lines else type(e).__name__)[:600]


def run(workloads: Iterable[Workload], record: Callable[[Workload, Measured | None, float, str | None], None],
        *, jobs: int = 6, runs: int = 10, warmup: int = 2, batch: int | None = None) -> None:
    """Compiles `jobs` workloads at a time ahead of the chip, and records each: (workload, measured or None,
    compile seconds, error or None). `batch`: compile and time that many at a time (None: all compiled first), so that
    a command cut at a host's time limit keeps every batch it finished (the zoo's commands)."""
    workloads = list(workloads)
    size = batch or max(1, len(workloads))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for start in range(0, len(workloads), size):  # every compile of a batch done before any timing:
            part = list(enumerate(workloads[start:start + size], start))  # a compile beside a timed call slows the
            built = list(pool.map(_compile, part))  # host's dispatch
            for (index, w), (compiled, compile_s, error) in zip(part, built, strict=True):
                measured = None
                if compiled is not None:
                    try:
                        measured = timed(compiled, w.make()[1], compile_s, runs=runs, warmup=warmup,
                                         assigned_temp=assigned.temp_bytes(index))
                    except Exception as e:  # noqa: BLE001
                        error = _last_line(e)
                record(w, measured, compile_s, error)
