"""What the pod cases share: array sizes, and the checks of a compiled program's per-chip figures."""

from __future__ import annotations

import math
from typing import Any

MiB = 2**20
LAYOUT_SLACK = 64 << 10
"""What the chip's tiled layouts add to a sharded program's arguments (an int32[8] takes 512 bytes)."""


def bytes_of(shape: tuple[int, ...], itemsize: int) -> int:
    return math.prod(shape) * itemsize


def check_all(outcome: Any, *, arguments: int | None = None, kernels: int | None = None,
              temp_below: int | None = None) -> None:
    """Each chip's arguments are `arguments` bytes (what sharding leaves each chip, within the layouts'
    padding), the program holds `kernels` Pallas calls, and its temp memory per chip stays below
    `temp_below` bytes."""
    memory, name = outcome.memory, outcome.name
    if arguments is not None:
        assert arguments <= memory["argument"] <= arguments + LAYOUT_SLACK, \
            f"{name}: {memory['argument']} argument bytes per chip, expected {arguments} (its shard)"
    if kernels is not None:
        assert outcome.hlo["tpu_custom_call"] == kernels, \
            f"{name}: {outcome.hlo['tpu_custom_call']} kernel calls, expected {kernels}"
    if temp_below is not None:
        assert memory["temp"] < temp_below, \
            f"{name}: {memory['temp'] / MiB:.0f} MiB temp per chip, expected under {temp_below / MiB:.0f} MiB"
