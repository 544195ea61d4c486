"""TRL's trainers on the kernel (TRL 1.16: SFT, DPO, KTO, GRPO, RLOO): their fused LM head, which
TRL adds to every model it trains, runs `torch_ops.lm_head_statistics` for a model that
`tokamax.use_fused_loss(model)` marked, with TRL's own code unchanged; and `DistillationTrainer`'s
divergence runs `torch_ops.distillation_divergence` for a student so marked.

- `hooks`: forward hooks telling which model a fused forward serves.
- `reference`: a reference model TRL loads from the policy's checkpoint gets those hooks too.
- `dispatch`: what stands where TRL looks up its function, and the fallback to TRL's own.
- `head`: TRL's contract (nine arguments, five outputs) on the kernel.
- `distill`: what stands where `DistillationTrainer` looks up its divergence function (and its loss,
  which says whose head the call is for); `divergence`: that function's contract (twelve arguments,
  two outputs) on the distillation kernels.
"""

from .dispatch import calls, install
from .hooks import attach

__all__ = ["attach", "calls", "install"]
