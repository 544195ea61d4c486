"""The public surface a case calls, on either side: upstream's `tokamax` or this kernel's `ops`."""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any


@dataclasses.dataclass(frozen=True)
class PublicApi:
    """What the cases call: the public ops, the config options, qwix, and the Op classes."""

    ragged_dot: Any
    ragged_dot_general: Any
    config: Any
    qwix: Any
    AsQArray: Any
    RaggedDot: Any
    V2RaggedDot: Any
    mosaic: Any  # the pallas_mosaic_tpu implementation module (for its dimension numbers)
    cache_adapter: Any = None  # upstream only: parses a table key as upstream's cache does


def upstream() -> PublicApi:
    import qwix
    from tokamax._src import quantization
    from tokamax._src.autotuning import cache
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu as v1
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu_v2 as v2

    import tokamax

    return PublicApi(tokamax.ragged_dot, tokamax.ragged_dot_general, tokamax.config, qwix, quantization.AsQArray,
                     v1.PallasMosaicTpuRaggedDot, v2.PallasMosaicTpuV2RaggedDot, v1,
                     cache_adapter=cache._get_cache_adapter)


def ours(kernel: ModuleType) -> PublicApi:
    ops = kernel.ops
    src = f"{kernel.__name__}._ported._src"
    qwix = importlib.import_module(f"{kernel.__name__}._ported._vendor.qwix")
    quantization = importlib.import_module(f"{src}.quantization")
    v1 = importlib.import_module(f"{src}.ops.ragged_dot.pallas_mosaic_tpu")
    return PublicApi(ops.ragged_dot, ops.ragged_dot_general, ops.config, qwix, quantization.AsQArray,
                     ops.RaggedDot, ops.V2RaggedDot, v1)
