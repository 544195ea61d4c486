"""Seconds per source line of one function, for a step whose time sits in a function's own lines (DPO on the chip:
cProfile put 60 of its 67 s of loss in `DPOTrainer._compute_loss` itself, that is in tensor operators and the
reads of device values, which cProfile does not split). Only that function's frames are traced, line by line: the
time from a line's start to the next line event of the same frame is the line's (calls made on it included).

    TORCH_CHIP_LINE_TIMES=trl.trainer.dpo_trainer:DPOTrainer._compute_loss   # a TRL child's environment

The child's record then holds the slowest lines (`line_times`)."""

from __future__ import annotations

import collections
import contextlib
import importlib
import linecache
import sys
import time
from collections.abc import Iterator
from typing import Any

VARIABLE = "TORCH_CHIP_LINE_TIMES"
KEPT = 15  # lines in a record


def resolve(target: str) -> Any:
    """'module:Qualified.name' -> its code object."""
    module, _, qualified = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "__code__", None) or obj.__func__.__code__


class LineTimes:
    def __init__(self, code: Any) -> None:
        self.code = code
        self.seconds: collections.Counter[int] = collections.Counter()
        self.hits: collections.Counter[int] = collections.Counter()
        self._last: dict[int, tuple[int, float]] = {}  # frame id -> (line, when it started)

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        now = time.perf_counter()
        key = id(frame)
        if key in self._last:
            line, start = self._last.pop(key)
            self.seconds[line] += now - start
        if event == "line":
            self._last[key] = (frame.f_lineno, now)
            self.hits[frame.f_lineno] += 1
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        return self._local if event == "call" and frame.f_code is self.code else None

    def slowest(self, kept: int = KEPT) -> list[dict[str, Any]]:
        path = self.code.co_filename
        return [{"line": line, "seconds": round(s, 4), "hits": self.hits[line],
                 "source": linecache.getline(path, line).strip()[:160]} for line, s in self.seconds.most_common(kept)]


@contextlib.contextmanager
def traced(target: str | None) -> Iterator[LineTimes | None]:
    """Times `target`'s lines within the block (None: nothing traced). The previous trace function is restored."""
    if not target:
        yield None
        return
    times = LineTimes(resolve(target))
    previous = sys.gettrace()
    sys.settrace(times._global)  # noqa: SLF001
    try:
        yield times
    finally:
        sys.settrace(previous)
