"""TRL's `_chunked_divergence_loss` (trl 1.16, `trl/trainer/distillation_trainer.py`) on the kernel: the same
arguments and the same three results (the loss, the summed entropy of the valid tokens and their count), the loss
computed by `torch_ops.distillation_loss`, which makes its gradients in the forward (`tokamax.distill.fused`): four
matmuls in one chunk's memory at any number of completion tokens, where the per-token divergence (`divergence`,
what `ChunkedDivergenceFunction` stands for) keeps Q for every row or, past an eighth of the chip's HBM, runs the
kernels' six matmuls.

TRL's function around its `ChunkedDivergenceFunction` call is kept as it is: a DTensor head gathered once (its
weight cast to the hidden states' dtype), every position projected (no compaction off CUDA and XPU), the
divergence of the masked positions dropped, the loss divided by `num_items_in_batch` when given, else by the valid
positions (at least one). Here that reduction becomes the per-token weights the fused loss takes: the completion
mask over the same divisor. The rows are padded to `tokamax.splash.bucket` sizes with weight 0, as `divergence`
pads them, so that torch-tpu exports one program per bucket.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import splash, torch_ops
from .divergence import _cap
from .head import compute_dtype


def _gathered(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A DTensor head gathered once, as TRL gathers it (its weight in the hidden states' dtype)."""
    if isinstance(weight, torch.distributed.tensor.DTensor):
        weight = weight.full_tensor().to(dtype)
        if bias is not None:
            bias = bias.full_tensor()
    return weight, bias


def chunked_divergence_loss(student_hidden_states: torch.Tensor, teacher_hidden_states: torch.Tensor,
                            student_lm_head_weight: torch.Tensor, teacher_lm_head_weight: torch.Tensor,
                            completion_mask: torch.Tensor, beta: float,
                            num_items_in_batch: torch.Tensor | int | None = None,
                            student_lm_head_bias: torch.Tensor | None = None,
                            teacher_lm_head_bias: torch.Tensor | None = None, student_logit_scale: float = 1.0,
                            teacher_logit_scale: float = 1.0, student_final_logit_softcapping: float | None = None,
                            teacher_final_logit_softcapping: float | None = None, temperature: float = 1.0
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the loss, the entropy summed over the valid positions, their count), as TRL's function returns them."""
    ws, bs = _gathered(student_lm_head_weight, student_lm_head_bias, student_hidden_states.dtype)
    wt, bt = _gathered(teacher_lm_head_weight, teacher_lm_head_bias, teacher_hidden_states.dtype)
    valid = completion_mask.reshape(-1) != 0
    n_valid = valid.sum()
    s_dtype, t_dtype = compute_dtype(student_hidden_states), compute_dtype(teacher_hidden_states)
    hs = student_hidden_states.reshape(-1, student_hidden_states.size(-1))
    ht = teacher_hidden_states.reshape(-1, teacher_hidden_states.size(-1))
    if num_items_in_batch is None:
        divisor = n_valid.clamp(min=1).to(torch.float32)
    elif isinstance(num_items_in_batch, torch.Tensor):
        divisor = num_items_in_batch.to(device=hs.device, dtype=torch.float32)
    else:
        divisor = torch.tensor(float(num_items_in_batch), device=hs.device)
    rows = hs.shape[0]
    padded = splash.bucket(rows) if rows else 0

    def rows_padded(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (0, padded - rows) if x.dim() == 1 else (0, 0, 0, padded - rows))

    weights = rows_padded(valid.to(torch.float32) / divisor)
    with torch.autocast(hs.device.type, enabled=False):
        loss, _, entropy = torch_ops.distillation_loss(
            rows_padded(hs.to(s_dtype)), ws.to(s_dtype), bs, rows_padded(ht.to(t_dtype)), wt.to(t_dtype), bt,
            weights, beta=beta, temperature=temperature, student_logit_scale=student_logit_scale,
            student_soft_cap=_cap(student_final_logit_softcapping), teacher_logit_scale=teacher_logit_scale,
            teacher_soft_cap=_cap(teacher_final_logit_softcapping))
    entropy_sum = entropy[:rows].masked_fill(~valid, 0).sum()
    return loss, entropy_sum, n_valid
