"""`lm_head_statistics`, what users call: argument checks, the logit transform from a model's or a
trainer's numbers, and the statistics by name."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ... import lm_head
from .. import _checks
from ..linear_softmax_cross_entropy.labels import refuse
from .custom_ops import OP, lm_head_stats_op
from .stored_ops import lm_head_stats_stored_op, statistics_layout


class LMHeadStatistics(NamedTuple):
    """Per row (float32 [rows] each), of the logits z = transform(hidden @ weight.T + bias), in this order:
    `lse` log sum e^z; `target_logit` z[target]; `mean_logit` E_p[z] (lse - entropy); `log_sum_sq_probs`
    log sum p^2; `sum_logits` sum z; `top1` 1.0 where the target is z's first maximum; `entropy` -sum p log p
    (computed shifted by the row's maximum, so >= 0 and exact to its own rounding even where the logits are
    ~40). The entropy was added last, so the first six keep their places. Differentiable: lse, target_logit,
    mean_logit, sum_logits, entropy."""

    lse: torch.Tensor
    target_logit: torch.Tensor
    mean_logit: torch.Tensor
    log_sum_sq_probs: torch.Tensor
    sum_logits: torch.Tensor
    top1: torch.Tensor
    entropy: torch.Tensor

    @property
    def log_probs(self) -> torch.Tensor:
        return self.target_logit - self.lse


def lm_head_statistics(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                       *, logit_scale: float = 1.0, soft_cap: float | None = None,
                       temperature: float = 1.0) -> LMHeadStatistics:
    """Per-row statistics of an LM head's logits without holding them in float32 (`tokamax.lm_head`),
    differentiable in hidden, weight and bias: the stored scheme (`statistics_layout`: plain XLA keeping the
    softmax in hidden's dtype for the rows an eighth of the chip's HBM holds, the others' logits computed again in
    the backward) where its roofline is below the kernels', else our kernels (no [rows, vocab] array at all; the
    backward computes the logits again; in a graph torch.compile traces too).

    hidden [rows, hidden] and weight [vocab, hidden] (nn.Linear's layout) of one dtype, bf16 or f32;
    bias [vocab] or None; targets int [rows] in [0, vocab): any other target is refused on CPU tensors
    and makes its row NaN (every statistic, no gradient) elsewhere, as the cross-entropy's labels
    (mask ignored positions after, with a valid target such as 0 in their place, as TRL does). The
    logits are the raw ones times `logit_scale`, then `soft_cap * tanh(. / soft_cap)` if `soft_cap`,
    then divided by `temperature` (TRL's order). Needs no particular jax; CPU tensors run in interpret
    mode (slow).
    """
    _checks.tensors(OP, ("bias",), hidden=hidden, weight=weight, bias=bias, targets=targets)
    _checks.floats(OP, hidden=hidden, weight=weight)
    _checks.rank(OP, "hidden", hidden, (2,), "[rows, hidden]")
    _checks.rank(OP, "weight", weight, (2,), "[vocab, hidden]")
    _checks.same(OP, "the hidden sizes", hidden=hidden.shape[1], weight=weight.shape[1])
    _checks.dtype(OP, "targets", targets, (torch.int32, torch.int64))
    _checks.shape(OP, "targets", targets, (hidden.shape[0],), "[rows]")
    if bias is not None:
        _checks.shape(OP, "bias", bias, (weight.shape[0],), "[vocab]")
        if not bias.is_floating_point():
            raise TypeError(f"tokamax {OP}: bias must be a floating-point tensor, got {bias.dtype}")
    try:
        transform = lm_head.LogitTransform.of(scale=logit_scale, soft_cap=soft_cap, temperature=temperature)
    except ValueError as e:
        raise ValueError(str(e).replace("tokamax lm_head", f"tokamax {OP}")) from None
    refuse(OP, "targets", targets, weight.shape[0])
    args = (hidden.contiguous(), weight.contiguous(), None if bias is None else bias.contiguous(),
            targets.to(torch.int32).contiguous(), transform.pre, transform.tanh, transform.post)
    # torch.compile traces no host choice (JAX answers it): the kernels there
    layout = None if torch.compiler.is_compiling() else statistics_layout(hidden, weight, transform)
    out = lm_head_stats_stored_op(*args, *layout)[:len(lm_head.OUTPUTS)] if layout else lm_head_stats_op(*args)
    return LMHeadStatistics(*out)
