"""Public DeepSeek-V4 CSA cache gather calls (`ops.csa_gather`, a SparseCore kernel) on v6e and
TPU7x, the chips with a SparseCore that upstream's Op admits (v5e has none); the op has no VJP.
Upstream's heuristic config, a count of valid indices, and indices off the top_k periods (refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the csa gather table is registered in tpu_ops_cases.py


def _specs(num_pages: int, page_size: int, num_indices: int, num_valid: bool) -> tuple:
    specs = (((num_pages, page_size, 128), "int32"), ((num_pages, page_size // 4, 128), "int32"),
             ((num_indices,), "int32"))
    return (*specs, ((1,), "int32")) if num_valid else specs


def _forward(top_k: int, implementation: Any = "mosaic_tpu") -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.csa_gather(*args, top_k=top_k, implementation=implementation))


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in ("v6e", "v7x"):
        out += [
            PublicCase("csa_gather/topk256-n512/fwd", chip, _specs(4, 64, 512, False), _forward(256)),
            PublicCase("csa_gather/default-topk512-n1024-num-valid/fwd", chip, _specs(2, 256, 1024, True),
                       _forward(512, None)),
        ]
    # 384 indices are not a whole number of top_k=256 periods: upstream's Op refuses them.
    out.append(PublicCase("csa_gather/indices-off-topk-refused/fwd", "v7x", _specs(4, 64, 384, False),
                          _forward(256)))
    return out
