"""Upstream's linear softmax cross-entropy (the loss of softmax(x @ w) without the logits) at any
size, in JAX: what the Torch op and transformers' fused causal-LM loss run when sizes are off the
kernel's lanes.

- `padding`: x, labels and w padded to multiples of 128 so that no padded row, hidden column or
  vocabulary column changes a real row's loss or gradient.
- `rows`: `row_losses` (per-row losses and log-sum-exps of the padded problem, through upstream's
  public op) and `row_losses_vjp` (upstream's VJP Op on those residuals, cut back to x and w).
"""

from .padding import LANES, PADDED_LOGIT, padded_operands, padded_rows
from .rows import row_losses, row_losses_vjp

__all__ = ["LANES", "PADDED_LOGIT", "padded_operands", "padded_rows", "row_losses", "row_losses_vjp"]
