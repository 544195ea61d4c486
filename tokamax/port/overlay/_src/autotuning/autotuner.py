"""Autotuning results as the Op layer reads them: the fastest config of a table entry.

The port keeps only each entry's fastest config (`compact_autotuning`), so an entry here maps
that one config to nothing; running the autotuner itself is upstream tokamax's job.
"""

from __future__ import annotations

from typing import Any

from ..benchmarking import _WHY


class AutotuningData(dict):
    """Configs of one table entry, fastest first (here: at most the fastest)."""

    @property
    def fastest_config(self) -> Any:
        if not self:
            raise ValueError("Autotuning data is empty")
        return next(iter(self))


class Autotuner:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def autotune(self, *args: Any, **kwargs: Any) -> AutotuningData:
        raise NotImplementedError(_WHY)
