"""Per-row statistics of an LM head's logits on Torch tensors (`tokamax.lm_head`): log-sum-exp, target logit,
mean logit, log sum p^2, sum of logits, top-1 and entropy (in that order), with a bias, logit scale, soft cap and
temperature, differentiable in the hidden states, the weight and the bias; never the float32 [rows, vocab] logits
(our kernels hold no [rows, vocab] array; the stored scheme, taken where it fits, keeps p in the hidden states'
dtype). What TRL's fused LM head and the fused loss's options (soft caps, z-loss, label smoothing) run on.

- `api`: `lm_head_statistics` and its result, `LMHeadStatistics`.
- `custom_ops`: the forward and backward custom ops on the kernels.
- `stored_ops`: those of the stored scheme (`tokamax.lm_head.stored`), and `statistics_layout`, which takes it.
- `loss`: `lm_head_cross_entropy`, a summed cross-entropy whose gradients come out of the forward
  (`tokamax.lm_head.fused`: Liger's three-matmul scheme where it fits the chip and is faster; our kernels'
  backward runs in autograd's, with the loss's cotangent).
"""

from .api import LMHeadStatistics, lm_head_statistics
from .custom_ops import lm_head_stats_bwd_op, lm_head_stats_bwd_x_op, lm_head_stats_op
from .loss import (
    lm_head_cross_entropy,
    lm_head_loss_grad_x_op,
    lm_head_loss_grads_op,
    lm_head_loss_rows_bwd_op,
    lm_head_loss_rows_bwd_x_op,
    lm_head_loss_rows_op,
    loss_chunk,
)
from .stored_ops import (
    lm_head_stats_stored_bwd_op,
    lm_head_stats_stored_bwd_x_op,
    lm_head_stats_stored_op,
    statistics_layout,
)

__all__ = ["LMHeadStatistics", "lm_head_cross_entropy", "lm_head_loss_grad_x_op", "lm_head_loss_grads_op",
           "lm_head_loss_rows_bwd_op", "lm_head_loss_rows_bwd_x_op", "lm_head_loss_rows_op", "lm_head_statistics",
           "lm_head_stats_bwd_op", "lm_head_stats_bwd_x_op", "lm_head_stats_op",
           "lm_head_stats_stored_bwd_op", "lm_head_stats_stored_bwd_x_op", "lm_head_stats_stored_op", "loss_chunk",
           "statistics_layout"]
