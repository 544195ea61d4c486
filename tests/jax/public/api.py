"""The public surface a case calls, on either side: upstream's `tokamax` or this kernel.

Both have the same layout: `ops` (`ragged_dot`, `tpu.RaggedDot`, `experimental.splash_attention`,
...), `ops.config`, and the modules below the package root by upstream path (`_src.ops...`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any


@dataclasses.dataclass(frozen=True)
class PublicApi:
    """What the cases call: the public namespace, its options, and modules by upstream path."""

    ops: Any
    config: Any
    module: Callable[[str], ModuleType]  # "_src.ops.ragged_dot.base" -> that module on this side
    cache_adapter: Any = None  # upstream only: parses a table file as upstream's cache does


def upstream() -> PublicApi:
    from tokamax._src.autotuning import cache

    import tokamax

    return PublicApi(tokamax.ops, tokamax.config, lambda path: importlib.import_module(f"tokamax.{path}"),
                     cache_adapter=cache._get_cache_adapter)


def ours(kernel: ModuleType) -> PublicApi:
    root = f"{kernel.__name__}._ported"
    return PublicApi(kernel.ops, kernel.ops.config, lambda path: importlib.import_module(f"{root}.{path}"))
