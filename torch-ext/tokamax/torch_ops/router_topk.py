"""The sort-free MoE router top-k on Torch tensors, through upstream's public `router_topk`: per token,
the k best experts by k passes of (row max, lowest matching column, mask it out); ties go to the lowest
expert id and NaN, -inf and -FLT_MAX scores are never chosen over a finite one. Forward only (upstream
registers no backward). Upstream runs the kernel on TPU v6e and newer; on CPU tensors it runs in Pallas
TPU interpret mode (as `emulation.cpu_chip()`).
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["router_topk", "router_topk_op"]

_SCORE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # upstream's; cast to float32 exactly


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(upstream="RouterTopK", op="router_topk")
def _router_topk_jax(scores: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    weights, indices = ops.router_topk(scores, k, implementation="mosaic_tpu")
    return weights, indices


router_topk_op = register("router_topk", _router_topk_jax)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@router_topk_op.register_fake
def _router_topk_fake(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (scores.shape[0], k)
    return scores.new_empty(shape, dtype=torch.float32), scores.new_empty(shape, dtype=torch.int32)


# ---- What users call ---------------------------------------------------------------------------

def router_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top `k` experts of each token, without a sort.

    scores [tokens, experts], float32, bfloat16 or float16 (cast to float32 exactly); k in
    [1, experts]. Returns `(weights, indices)`, both [tokens, k]: float32 weights, descending, and
    int32 expert ids. As `torch.topk(scores.float(), k)` except that ties resolve to the lowest
    expert id and NaN, -inf and -FLT_MAX (anything at or below -3e38) are never selected over a
    finite score; they are selected as -3e38, and a row made only of them gets NaN weights and
    experts 0..k-1.

    More than 8 MiB of float32 scores per block (upstream's blocks are min(512, tokens) rows:
    above 4096 experts) raise upstream's NotImplementedError.
    """
    op = "router_topk"
    _checks.tensors(op, scores=scores)
    _checks.dtype(op, "scores", scores, _SCORE_DTYPES)
    _checks.rank(op, "scores", scores, (2,), "[tokens, experts]")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k > scores.shape[1]:
        raise ValueError(f"tokamax {op}: k must be an int in [1, experts={scores.shape[1]}], got {k!r}")
    return router_topk_op(scores.contiguous(), k)
