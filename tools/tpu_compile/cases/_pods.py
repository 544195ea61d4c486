"""What the pod cases share: array sizes, and the checks of a compiled program's per-chip figures."""

from __future__ import annotations

import math
from typing import Any

MiB = 2**20


def bytes_of(shape: tuple[int, ...], itemsize: int) -> int:
    return math.prod(shape) * itemsize


def check_all(outcome: Any, *, arguments: int | None = None, kernels: int | None = None,
              temp_below: int | None = None) -> None:
    """Each chip's arguments are `arguments` bytes (what sharding leaves each chip), the program holds
    `kernels` Pallas calls, and its temp memory per chip stays below `temp_below` bytes."""
    memory, name = outcome.memory, outcome.name
    if arguments is not None:
        assert memory["argument"] == arguments, \
            f"{name}: {memory['argument']} argument bytes per chip, expected {arguments} (its shard)"
    if kernels is not None:
        assert outcome.hlo["tpu_custom_call"] == kernels, \
            f"{name}: {outcome.hlo['tpu_custom_call']} kernel calls, expected {kernels}"
    if temp_below is not None:
        assert memory["temp"] < temp_below, \
            f"{name}: {memory['temp'] / MiB:.0f} MiB temp per chip, expected under {temp_below / MiB:.0f} MiB"
