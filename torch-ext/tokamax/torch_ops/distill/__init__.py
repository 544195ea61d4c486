"""Distillation's per-token divergence between a student's and a teacher's LM heads on Torch tensors (our
kernels, `tokamax.distill`): what TRL's `DistillationTrainer` runs on under `tokamax.use_fused_loss`.

- `api`: `distillation_divergence`.
- `custom_ops`: the kernels' forward and backward custom ops.
- `stored_ops`: the stored scheme's (`tokamax.distill.stored`), and `divergence_chunk`, which one a call takes.
"""

from .api import distillation_divergence
from .custom_ops import distill_divergence_bwd_op, distill_divergence_bwd_x_op, distill_divergence_op
from .stored_ops import (
    distill_divergence_stored_bwd_op,
    distill_divergence_stored_bwd_x_op,
    distill_divergence_stored_op,
    divergence_chunk,
)

__all__ = ["distill_divergence_bwd_op", "distill_divergence_bwd_x_op", "distill_divergence_op",
           "distill_divergence_stored_bwd_op", "distill_divergence_stored_bwd_x_op", "distill_divergence_stored_op",
           "distillation_divergence", "divergence_chunk"]
