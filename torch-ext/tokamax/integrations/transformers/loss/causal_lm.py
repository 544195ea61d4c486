"""transformers' `ForCausalLMLoss`, computed from hidden states and the LM head's weight: the same
label shift, `ignore_index`, `shift_labels` and reductions (`num_items_in_batch`: the sum over the
labels kept, divided by it; else their mean, NaN when every label is ignored, as torch's
cross_entropy), with the logits never formed (the Torch op `linear_softmax_cross_entropy_loss`).

Numerics: transformers rounds the logits to the model's dtype before upcasting them to float32;
here they stay in the kernel's float32 accumulators, so bf16 models see a slightly more exact loss.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .... import torch_ops


def causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor | None, *,
                   num_items_in_batch: torch.Tensor | int | None = None, ignore_index: int = -100,
                   shift_labels: torch.Tensor | None = None, replicated_on: Any = None) -> torch.Tensor:
    """float32 loss of next-token prediction: `hidden` [..., hidden] (the positions the model kept),
    `weight` the LM head's [vocab, hidden], `labels` [...] (shifted here) or `shift_labels`
    (already shifted; then `labels` is not read). `replicated_on`: the device mesh of a tensor-parallel
    head (its weight a DTensor split over the vocabulary), over which every rank holds the same hidden
    states and labels; they enter the loss as replicated DTensors on it, the loss comes back plain."""
    if shift_labels is None:
        if labels is None:
            raise ValueError("tokamax fused loss: labels or shift_labels are needed")
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    x = hidden.reshape(-1, hidden.shape[-1]).to(weight.dtype)
    targets = shift_labels.reshape(-1).to(device=x.device, dtype=torch.int32)
    if targets.shape[0] != x.shape[0]:
        raise ValueError(f"tokamax fused loss: {targets.shape[0]} label positions for {x.shape[0]} hidden states "
                         "(with logits_to_keep, pass shift_labels for the positions kept)")
    if replicated_on is not None:
        from torch.distributed.tensor import DTensor, Replicate

        x, targets = (DTensor.from_local(t, replicated_on, [Replicate()], run_check=False) for t in (x, targets))
    total, _ = torch_ops.linear_softmax_cross_entropy_loss(x, targets, weight.t(), reduction="sum",
                                                           ignore_index=ignore_index)
    if replicated_on is not None:
        total, targets = total.to_local(), targets.to_local()
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(total.device)
        return total / num_items_in_batch
    return total / (targets != ignore_index).sum()
