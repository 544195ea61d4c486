"""The LM head's per-row statistics without [tokens, vocabulary] logits, in JAX: Pallas TPU kernels
of our own beside upstream's linear softmax cross-entropy (which gives a row's log-sum-exp and label
logit only), for what TRL's trainers and Liger-style losses need: log-probabilities, the entropy,
log sum p^2, the mean logit and top-1, with a bias, a logit scale, a soft cap and a temperature, and
their gradients.

- `transform`: `LogitTransform`, the map from raw logits to the softmax's logits.
- `blocks`: block sizes, what they hold in VMEM (libtpu's figures) and the VMEM limit they are compiled with.
- `plan`: each kernel's own blocks for a call, by the roofline of its cost on the chip.
- `cost`: each kernel's cost from its grid and blocks (HBM bytes, flops, exp/log, the `pl.CostEstimate` it declares,
  the roofline time on a chip).
- `kernels`: the forward and the two backward Pallas kernels.
- `fused`: a cross-entropy with its gradients computed in the forward (Liger's scheme where it fits and is
  faster, else the kernels), for a loss that is the step's last op.
- `accumulate`, `streamed`: the chunked scheme's dW added in a kernel; a chunk in two kernels with G in VMEM.
- `loss`: that loss under `jax.grad` (`jax.custom_vjp`): transformers' labels loss for a JAX step.
- `stats`: `row_stats` / `row_stats_vjp` at any size (padding), `statistics` (differentiable; `scheme=`).
- `stored`: `statistics`' other scheme, plain XLA over chunks of rows with the softmax kept for the backward.
- `softmax`: a row's log-softmax and entropy in plain XLA, for the schemes that run XLA (distillation's too).
- `targets`: targets outside the vocabulary refused on the host, NaN rows elsewhere.
"""

from . import cost, fused, loss, plan
from .blocks import Blocks
from .plan import Plan
from .stats import OUTPUTS, SCHEMES, RowStats, coefficients, row_stats, row_stats_vjp, statistics
from .transform import IDENTITY, LogitTransform

__all__ = ["IDENTITY", "OUTPUTS", "SCHEMES", "Blocks", "LogitTransform", "Plan", "RowStats", "coefficients", "cost",
           "fused", "loss", "plan", "row_stats", "row_stats_vjp", "statistics"]
