"""Upstream's SparseCore gathers, checked first: calls their kernels cannot serve are refused here,
naming the op and the argument, instead of failing in Mosaic's lowering (or in upstream's words).

Both kernels stream rows in column chunks of whole 128-lane tiles. `ragged_gather` looks for a chunk
width dividing the hidden size and, finding none (2,880, gpt-oss's), lowers a gather whose indexer
shape Mosaic rejects ("The indexer shape in scatter/gather via `pltpu.async_copy` does not match");
`ragged_gather_reduce` refuses the same hidden sizes itself, without saying which op. An
implementation list that also names another implementation goes on to it, as upstream's does.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

LANES = 128
_OPS = "._ported._src.ops"


def _upstream(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"{_OPS}.{module}", __package__.rsplit(".", 1)[0]), name)


def _others(implementation: Any, kernel: str, default: tuple[str, ...]) -> list[Any]:
    """The implementations besides the SparseCore kernel (named by string or given as its Op)."""
    chosen: Sequence[Any] = default if implementation is None else (
        (implementation,) if isinstance(implementation, str) else implementation)
    return [i for i in chosen if i != kernel and type(i).__name__ not in ("PallasTpuRaggedGather",
                                                                            "PallasTpuRaggedGatherReduce")]


def _hidden_check(op: str, x: Any, implementation: Any, kernel: str, default: tuple[str, ...]) -> Any:
    """`implementation` unchanged when the kernel can serve `x`; else the other implementations, or a refusal."""
    hidden = x.shape[-1]
    if hidden % LANES == 0:
        return implementation
    others = _others(implementation, kernel, default)
    if not others:
        raise NotImplementedError(
            f"tokamax {op}: x's hidden size ({hidden}) must be a multiple of {LANES} for the SparseCore kernel "
            f"(implementation={kernel!r}); pad x's rows to {-(-hidden // LANES) * LANES}, or add 'xla' to the "
            f"implementations")
    return tuple(others)


def ragged_gather(x: Any, indices: Any, start: Any, end: Any, *, implementation: Any = None) -> Any:
    """Upstream's `tokamax.ragged_gather` (rows of `x` at `indices`, within `[start, end)`)."""
    implementation = _hidden_check("ragged_gather", x, implementation, "mosaic", ("mosaic", "xla"))
    return _upstream("ragged_gather.api", "ragged_gather")(x, indices, start, end, implementation=implementation)


def ragged_gather_reduce(x: Any, indices: Any, topk_weights: Any, valid_rows_mask: Any, reduce_group_size: int,
                         *, implementation: Any = None) -> Any:
    """Upstream's `tokamax.ragged_gather_reduce` (the MoE combine: weighted rows summed per group)."""
    implementation = _hidden_check("ragged_gather_reduce", x, implementation, "mosaic_tpu", ("mosaic_tpu", "xla"))
    return _upstream("ragged_gather_reduce.api", "ragged_gather_reduce")(
        x, indices, topk_weights, valid_rows_mask, reduce_group_size, implementation=implementation)
