"""Layers for `kernels.kernelize` (device "tpu"): forwards that replace transformers modules' own.

Following `kernels`' layer rules: no `__init__`, no members beyond `can_torch_compile` and
`has_backward`, and a `forward` with the parameters of the module it replaces; the replaced
module's parameters and submodules are used as they are.
"""

from __future__ import annotations

import torch

from .integrations.transformers.experts import experts_forward


class MegaBlocksMoeMLP(torch.nn.Module):
    """GPT-OSS's MoE block (`use_kernel_forward_from_hub("MegaBlocksMoeMLP")`): its router, then its
    experts as grouped matmuls on upstream's ragged dot."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, hidden = hidden_states.shape
        flat = hidden_states.reshape(-1, hidden)
        _, router_scores, router_indices = self.router(flat)
        out = experts_forward(self.experts, flat, router_indices, router_scores)
        return out.reshape(batch, length, hidden), router_scores
