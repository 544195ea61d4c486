"""Upstream's public TPU ops: the call a tokamax user makes, with its config choice and VJP.

`tokamax.ops.ragged_dot(lhs, rhs, group_sizes, ...)` is upstream's `tokamax.ragged_dot`, run by
upstream's own Op layer (ported at build time, without pydantic, jaxtyping or absl): the
config comes from the caller, else upstream's autotuning table for this chip and these
arguments, else upstream's heuristics, else defaults; `jax.grad` runs upstream's VJP.

Names load on first use, so importing the kernel stays as cheap as before.
"""

from __future__ import annotations

import importlib
from typing import Any

_SRC = "._ported._src"
# public name -> (module under this package's parent, attribute; "" for the module itself)
_NAMES: dict[str, tuple[str, str]] = {
    "ragged_dot": (f"{_SRC}.ops.ragged_dot.api", "ragged_dot"),
    "ragged_dot_general": (f"{_SRC}.ops.ragged_dot.api", "ragged_dot_general"),
    "RaggedDot": (f"{_SRC}.ops.ragged_dot.pallas_mosaic_tpu", "PallasMosaicTpuRaggedDot"),
    "RaggedDotConfig": (f"{_SRC}.ops.ragged_dot.pallas_mosaic_tpu", "Config"),
    "V2RaggedDot": (f"{_SRC}.ops.ragged_dot.pallas_mosaic_tpu_v2", "PallasMosaicTpuV2RaggedDot"),
    "V2RaggedDotConfig": (f"{_SRC}.ops.ragged_dot.pallas_mosaic_tpu_v2", "Config"),
    "RaggedDotGroupSizes": (f"{_SRC}.ops.ragged_dot.base", "GroupSizes"),
    "generate_ragged_dot_group_sizes": (f"{_SRC}.ops.ragged_dot.base", "generate_group_sizes"),
    "Op": (f"{_SRC}.ops.op", "Op"),
    "BoundArguments": (f"{_SRC}.ops.op", "BoundArguments"),
    "config": (f"{_SRC}.config", ""),  # the options module itself (cross_compile, ...)
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _NAMES[name]
    found = importlib.import_module(module, __package__.rpartition(".")[0])
    value = getattr(found, attr) if attr else found
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
