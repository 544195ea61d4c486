"""Distillation's per-token divergence between a student's and a teacher's LM heads on Torch tensors (our
kernels, `tokamax.distill`): what TRL's `DistillationTrainer` runs on under `tokamax.use_fused_loss`.

- `api`: `distillation_divergence`.
- `custom_ops`: the forward and backward custom ops.
"""

from .api import distillation_divergence
from .custom_ops import distill_divergence_bwd_op, distill_divergence_bwd_x_op, distill_divergence_op

__all__ = ["distill_divergence_bwd_op", "distill_divergence_bwd_x_op", "distill_divergence_op",
           "distillation_divergence"]
