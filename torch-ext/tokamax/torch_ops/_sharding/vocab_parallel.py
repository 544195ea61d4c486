"""The linear softmax cross-entropy with w's vocabulary split over ranks (vocabulary parallelism, as
transformers' tensor-parallel plan splits an LM head): each rank runs upstream's kernel (the per-row
op, `tokamax.lm_loss`) on its own columns, and the ranks combine per-row numbers, so no rank ever
holds [rows, vocab] logits.

Per row, rank r's kernel gives lse_r (the log-sum-exp over its columns) and loss_r = lse_r - z_r,
z_r the logit of the row's label where r holds that column; where it does not, the kernel gets
label 0 of its own shard (never a label outside its shard) and that z_r is dropped. Then
lse = logsumexp_r(lse_r) (numerically stable), z = z of the owning rank, loss = lse - z.

Backward, with g the loss's cotangent and p_r = exp(lse_r - lse) the softmax mass on rank r:
d loss / d logits_r = g (p_r softmax_r - owned_r onehot_r). The kernel's backward with cotangent
g p_r gives g p_r (softmax_r - onehot(label_r)); the rest, g (p_r - owned_r) onehot(label_r), is
w's label column gathered into dx and x scattered into dw's label column. dw stays this rank's
shard; dx, a partial sum on each rank, is all-reduced.

Across ranks per step: forward one all-gather of (lse_r, owned z_r), 8 bytes per row from each
rank (each receives 8 (world - 1)); backward one all-reduce of dx, hidden x the dtype's bytes per
row (what the unfused tensor-parallel head's backward all-reduces too). The unfused head also
all-gathers the logits, vocab x dtype bytes per row, which this never does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._tuned import backward_token, keep_token
from ..linear_softmax_cross_entropy.custom_ops import (
    linear_softmax_cross_entropy_rows_bwd_op,
    linear_softmax_cross_entropy_rows_op,
)

__all__ = ["shard_columns", "vocab_parallel_rows"]


# torch 2.13 names it all_gather_single (all_gather_into_tensor, deprecated there, before)
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def shard_columns(vocab: int, world: int, index: int) -> tuple[int, int]:
    """(start, size) of rank `index`'s columns under DTensor's Shard: torch.chunk's split (ceil-sized
    chunks, the last ones shorter or empty)."""
    chunk = -(-vocab // world)
    start = min(index * chunk, vocab)
    return start, min(vocab, start + chunk) - start


class _VocabParallelRows(torch.autograd.Function):
    """(losses, lse) per row, float32 [rows], of x [rows, hidden] against this rank's columns w
    [hidden, vocab_r], combined over `group`; `local_labels` int32 (in [0, vocab_r)), `owned` bool
    (this rank holds the row's label)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, local_labels: torch.Tensor, owned: torch.Tensor,
                group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor]:
        rows = x.shape[0]
        if w.shape[1]:
            losses_p, lse_p = linear_softmax_cross_entropy_rows_op(x, local_labels, w)  # padded rows
        else:  # the empty last shard of an uneven split: no columns, no softmax mass (the kernel needs one)
            lse_p = x.new_full((rows,), float("-inf"), dtype=torch.float32)
            losses_p = lse_p
        lse_r = lse_p[:rows]
        label_logit = torch.where(owned, lse_r - losses_p[:rows], 0.0)
        mine = torch.stack([lse_r, label_logit])
        world = dist.get_world_size(group)
        every = mine.new_empty((world * 2, rows))  # the ranks' tensors one after another along dim 0
        _all_gather(every, mine, group=group)
        every = every.view(world, 2, rows)
        lse = torch.logsumexp(every[:, 0], dim=0)
        ctx.save_for_backward(x, w, local_labels, owned, lse_p, losses_p, lse)
        ctx.group = group
        keep_token(ctx)  # the backward's kernel runs under the forward's autotuning result
        ctx.mark_non_differentiable(lse)
        return lse - every[:, 1].sum(dim=0), lse

    @staticmethod
    def backward(ctx: Any, d_losses: torch.Tensor, d_lse: torch.Tensor | None) -> tuple:
        # d_losses is never None here (autograd materialises an unused output's cotangent as zeros), so
        # every rank reaches the all-reduce below
        x, w, local_labels, owned, lse_p, losses_p, lse = ctx.saved_tensors
        rows = x.shape[0]
        g = d_losses.to(torch.float32)
        share = torch.exp(lse_p[:rows] - lse)  # p_r
        if w.shape[1]:
            d_kernel = F.pad(g * share, (0, lse_p.shape[0] - rows)).contiguous()
            with backward_token(ctx):
                dx, dw = linear_softmax_cross_entropy_rows_bwd_op(x, local_labels, w, lse_p, losses_p, d_kernel)
        else:
            dx, dw = torch.zeros_like(x, dtype=torch.float32), torch.zeros_like(w, dtype=torch.float32)
        c = g * (share - owned.to(torch.float32))  # the label column's own coefficient
        index = local_labels.long()
        if w.shape[1]:
            dx = dx + c[:, None] * w.t()[index].to(torch.float32)
            dw = dw.index_add(1, index, (x.to(torch.float32) * c[:, None]).t())
        dist.all_reduce(dx, group=ctx.group)
        return dx.to(x.dtype), dw.to(w.dtype), None, None, None


def vocab_parallel_rows(x: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, w_local: torch.Tensor,
                        start: int, group: dist.ProcessGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """(losses, lse), float32 [rows], losses 0 where not `valid`, for the whole vocabulary: x [rows,
    hidden] the same on every rank of `group` (dx comes back summed over them), labels int32 [rows]
    global, this rank's columns w_local [hidden, vocab_r] starting at column `start`."""
    owned = valid & (labels >= start) & (labels < start + w_local.shape[1])
    local_labels = torch.where(owned, labels - start, 0).to(torch.int32).contiguous()
    losses, lse = _VocabParallelRows.apply(x.contiguous(), w_local.contiguous(), local_labels, owned, group)
    return torch.where(valid, losses, 0.0), lse
