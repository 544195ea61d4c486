"""Distillation divergence kernels: TRL's `ChunkedDivergenceFunction` (trl 1.16,
`trl/kernels/chunked_divergence.py`, which `DistillationTrainer` calls) on Pallas TPU kernels of our
own, without either model's [tokens, vocabulary] logits.

The math as TRL defines it, per token (row) r, for the student's hidden states x_s [rows, hidden_s]
and head (w_s [vocab, hidden_s], b_s) and the teacher's x_t [rows, hidden_t], (w_t, b_t): hidden sizes
may differ, the vocabulary is the same.

- Logits, per model: l = x @ w.T + b (matmul in the operands' dtype, float32 out), then l * scale,
  then soft_cap * tanh(. / soft_cap) if the model caps, then / temperature (one temperature for both);
  p_s = softmax(z_s), p_t = softmax(z_t).
- beta 0: the forward KL(p_t || p_s) = sum_j p_t (log p_t - log p_s). beta 1: the reverse KL(p_s ||
  p_t). 0 < beta < 1: the generalized JSD with the mixture m = (1 - beta) p_s + beta p_t (the student
  weighted 1 - beta), beta KL(p_t || m) + (1 - beta) KL(p_s || m). (So beta 0 and 1 are not the JSD's
  limits, which are 0: TRL switches to the KLs there.)
- Out per token: that divergence and the student's entropy -sum_j p_s log p_s, float32 [rows] each.
  TRL's trainer masks both to the completion tokens and reduces: loss = sum(divergence) /
  num_items_in_batch when given (gradient accumulation), else / max(valid tokens, 1); the entropy is
  summed and logged (no gradient).
- Gradients: to the student's x_s, w_s and b_s only (the teacher is frozen; TRL marks the entropy
  non-differentiable). With g_r the divergence's cotangent, d/dz_s = g_r (p_s - p_t) (beta 0), g_r
  p_s (log p_s - log p_t - KL) (beta 1), g_r (1 - beta) p_s (log p_s - log m - KL(p_s || m))
  (between); times dz_s/dl (scale, 1 - tanh^2, 1/temperature); dx_s = G @ w_s, dw_s = G.T @ x_s, db_s
  = sum_r G. TRL rounds G to the student's dtype before these matmuls and accumulates in float32.
  Here the entropy has its gradient too (-p_s (log p_s + H)), for JAX users who differentiate it;
  the Torch op passes none, as TRL.

Modules:
- `blocks`: block sizes and what they hold in VMEM (both models' blocks).
- `cost`: each kernel's cost from its grid (the `pl.CostEstimate` it declares).
- `kernels`: the forward (one or two sweeps over the vocabulary) and the two backward Pallas kernels.
- `stored`: the same in plain XLA, four matmuls as the loss written plainly: a forward over chunks of rows
  that keeps the gradient's basis Q [rows, vocab] in the student's dtype, a backward of two matmuls from it;
  `stored.choose`, the rule that takes it where Q fits an eighth of the chip's HBM.
- `recompute`: the stored scheme's forward without Q, and a backward that makes Q again by vocabulary columns
  (six matmuls, no [rows, vocab] array kept): where Q does not fit, faster than the kernels.
- `fused`: the divergence as a step's loss with its gradients made in the forward (weights per token known before
  the backward, TRL's case): one pass over chunks of rows, four matmuls, one chunk's memory at any number of rows.
- `divergence`: checks (the operands, the VMEM fit), the call at any size by any scheme (`scheme`: "auto",
  "kernels", "stored", "recompute"; `scheme_of`: what "auto" runs), its VJP, and `divergence(...)`
  (differentiable); `loss(...)`, the weighted sum by the fused scheme.
"""

from . import blocks, cost, fused, recompute, stored
from .divergence import (
    SCHEMES,
    Chosen,
    Forward,
    backward,
    check,
    check_vmem,
    chunk_of,
    divergence,
    forward,
    loss,
    per_token,
    scheme_of,
    setting,
)
from .kernels import KINDS, OUTPUTS, Setting

__all__ = ["KINDS", "OUTPUTS", "SCHEMES", "Chosen", "Forward", "Setting", "backward", "blocks", "check", "check_vmem",
           "chunk_of", "cost", "divergence", "forward", "fused", "loss", "per_token", "recompute", "scheme_of",
           "setting", "stored"]
