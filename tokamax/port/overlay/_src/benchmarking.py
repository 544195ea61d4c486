"""Benchmarking and autotuning on a device are upstream tokamax's job, not this kernel's.

The Op layer names these at definition time; calling them says where to go instead.
"""

from __future__ import annotations

from typing import Any, Literal

BenchmarkMode = Literal["forward", "forward_res", "vjp", "forward_and_vjp"]
_WHY = "benchmarking and autotuning are not part of kernels-community/tokamax; use upstream tokamax for them"


class BenchmarkData:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(_WHY)


def standardize_function(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(_WHY)


def compile_benchmark(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(_WHY)
