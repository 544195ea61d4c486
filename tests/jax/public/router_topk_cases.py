"""Public MoE router top-k calls (`ops.router_topk`): upstream's kernel on v6e and TPU7x (generation
6 and newer), forward only (the op has no VJP); a caller's config with a partial last block; a bf16
input; and the default call on v5e, where upstream's Op says it is not supported: with upstream's
cross-compile option on (as every case here lowers) that device check is skipped, so upstream lowers
the Mosaic kernel for v5e too, and so must this kernel. And a k above the expert count, refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase

TABLES: list = []  # the router top-k table is registered in tpu_ops_cases.py


def _forward(k: int, implementation: Any = "mosaic_tpu", block_rows: int | None = None) -> Callable[[Any], Any]:
    def build(api: Any) -> Callable[..., Any]:
        impl = implementation
        if block_rows is not None:
            impl = [api.ops.tpu.RouterTopK(config=api.ops.tpu.RouterTopKConfig(block_rows=block_rows))]
        return lambda scores: api.ops.router_topk(scores, k, implementation=impl)
    return build


def cases() -> list[PublicCase]:
    out: list[PublicCase] = []
    for chip in ("v6e", "v7x"):
        out += [
            PublicCase("router_topk/t64-e512-k10/fwd", chip, (((64, 512), "float32"),), _forward(10)),
            # 40 rows in blocks of 16 (the caller's config): the last grid step reads a partial block.
            PublicCase("router_topk/t40-e256-k8-block16/fwd", chip, (((40, 256), "float32"),),
                       _forward(8, block_rows=16)),
            PublicCase("router_topk/default-bf16-t128-e384-k6/fwd", chip, (((128, 384), "bfloat16"),),
                       _forward(6, implementation=None)),
        ]
    # v5e: cross-compiling skips `supported_on`, so the default list's first entry, the kernel, runs.
    out.append(PublicCase("router_topk/default-v5e-t64-e512-k10/fwd", "v5e", (((64, 512), "float32"),),
                          _forward(10, implementation=None)))
    # k above the expert count: upstream's Op refuses it.
    out.append(PublicCase("router_topk/k-above-experts-refused/fwd", "v7x", (((16, 8), "float32"),), _forward(10)))
    return out
