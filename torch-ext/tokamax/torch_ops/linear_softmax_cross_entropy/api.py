"""`linear_softmax_cross_entropy_loss`, what users call: argument checks, and the choice between
upstream's public op as it is (sizes on the kernel's lanes, no ignored labels) and the per-row op on
the padded problem, whose rows are masked and reduced here."""

from __future__ import annotations

import torch

from .. import _checks, _sharding
from .custom_ops import OP, linear_softmax_cross_entropy_loss_op, linear_softmax_cross_entropy_rows_op
from .labels import out_of_range, poisoned

REDUCTIONS = ("sum", "mean", "none")
LANES = 128


def _on_lanes(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Every dimension a multiple of the kernel's 128 lanes (compared, never hashed: sizes may be symbolic)."""
    return x.shape[0] % LANES == 0 and x.shape[1] % LANES == 0 and w.shape[1] % LANES == 0


def linear_softmax_cross_entropy_loss(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor, *,
                                      reduction: str = "sum", ignore_index: int | None = None
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of `softmax(x @ w)` against `labels`, without the logits in memory; differentiable
    in x and w. Returns `(loss, lse)`, as upstream's Torch op does.

    x [batch, hidden] and w [hidden, vocab], bf16 or f32 (one dtype); labels int32 [batch], in
    [0, vocab), or equal to `ignore_index`: those rows add nothing and get no gradient, and "mean"
    divides by the rows not ignored (as torch's cross_entropy). Any other label is refused on CPU
    tensors and makes the loss NaN elsewhere (`labels.py`). `reduction`: "sum" (upstream's
    default), "mean" or "none" (a loss per row, 0 where ignored). loss and lse (float32 [batch], each
    row's log-sum-exp) are float32; lse is not differentiable.

    Any sizes: with every dimension a multiple of 128 and no `ignore_index` this is upstream's public
    op as it is; otherwise x and w are padded to the kernel's lanes inside (`tokamax.lm_loss`, a copy
    of each) and the padded rows dropped. Needs jax >= 0.11.1 for CPU and TPU tensors (the op says so
    from its JAX side); meta and fake tensors run the fake kernels with any jax.
    """
    _checks.tensors(OP, x=x, labels=labels, w=w)
    _checks.floats(OP, x=x, w=w)
    _checks.rank(OP, "x", x, (2,), "[batch, hidden]")
    _checks.rank(OP, "w", w, (2,), "[hidden, vocab]")
    _checks.dtype(OP, "labels", labels, (torch.int32,))
    _checks.shape(OP, "labels", labels, (x.shape[0],), "[batch]")
    _checks.same(OP, "the hidden sizes", x=x.shape[1], w=w.shape[0])
    _checks.choice(OP, "reduction", reduction, REDUCTIONS)
    if ignore_index is not None and (not isinstance(ignore_index, int) or isinstance(ignore_index, bool)):
        raise TypeError(f"tokamax {OP}: ignore_index must be an int or None, got {type(ignore_index).__name__}")
    if _sharding.is_dtensor(x, labels, w):  # rows or the vocabulary split over ranks (`_sharding.cross_entropy`)
        from .._sharding import cross_entropy

        return cross_entropy.loss(linear_softmax_cross_entropy_loss, x, labels, w, reduction=reduction,
                                  ignore_index=ignore_index)
    x, labels, w = x.contiguous(), labels.contiguous(), w.contiguous()
    bad = out_of_range(OP, labels, w.shape[1], ignore_index)
    if ignore_index is None and _on_lanes(x, w):
        loss, lse = linear_softmax_cross_entropy_loss_op(x, labels, w, reduction)
        return poisoned(loss, bad if reduction == "none" else bad.any()), lse
    valid = torch.ones_like(labels, dtype=torch.bool) if ignore_index is None else labels != ignore_index
    valid &= ~bad
    losses, lse = linear_softmax_cross_entropy_rows_op(x, torch.where(valid, labels, 0), w)
    rows = x.shape[0]
    losses = poisoned(torch.where(valid, losses[:rows], 0.0), bad)
    if reduction == "none":
        return losses, lse[:rows]
    total = losses.sum()
    return (total if reduction == "sum" else total / valid.sum()), lse[:rows]
