"""Distillation's per-token divergence between a student's and a teacher's LM heads on Torch tensors (our
kernels, `tokamax.distill`): what TRL's `DistillationTrainer` runs on under `tokamax.use_fused_loss`.

- `api`: `distillation_divergence`.
- `custom_ops`: the kernels' forward and backward custom ops.
- `stored_ops`: the stored scheme's (`tokamax.distill.stored`), and `divergence_chunk`, its chunk rows where it fits.
- `recompute_ops`: the recompute scheme's (`tokamax.distill.recompute`), and `divergence_scheme`, which of the
  three a call takes (the JAX call's rule, `distill.scheme_of`).
- `loss`: `distillation_loss`, the weighted sum as a step's loss with its gradients made in the forward
  (`tokamax.distill.fused`): TRL's DistillationTrainer's loss at any number of rows in one chunk's memory.
"""

from .api import distillation_divergence
from .custom_ops import distill_divergence_bwd_op, distill_divergence_bwd_x_op, distill_divergence_op
from .loss import distill_loss_chunk, distill_loss_grad_x_op, distill_loss_grads_op, distillation_loss
from .recompute_ops import (
    distill_divergence_recompute_bwd_op,
    distill_divergence_recompute_bwd_x_op,
    distill_divergence_recompute_op,
    divergence_scheme,
)
from .stored_ops import (
    distill_divergence_stored_bwd_op,
    distill_divergence_stored_bwd_x_op,
    distill_divergence_stored_op,
    divergence_chunk,
)

__all__ = ["distill_divergence_bwd_op", "distill_divergence_bwd_x_op", "distill_divergence_op",
           "distill_divergence_recompute_bwd_op", "distill_divergence_recompute_bwd_x_op",
           "distill_divergence_recompute_op", "distill_divergence_stored_bwd_op", "distill_divergence_stored_bwd_x_op",
           "distill_divergence_stored_op", "distill_loss_chunk", "distill_loss_grad_x_op", "distill_loss_grads_op",
           "distillation_divergence", "distillation_loss", "divergence_chunk", "divergence_scheme"]
