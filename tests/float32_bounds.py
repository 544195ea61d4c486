"""How far two computations of one quantity may differ when one of them runs in float32: a bound from
float32 rounding at the sizes involved, never from what one host's BLAS happened to give.

A float32 sum of n terms, in any order, is within gamma(n) * sum(|term|) of the exact sum (Higham,
Accuracy and Stability of Numerical Algorithms, §3.1; gamma(n) = n u / (1 - n u), u = 2^-24). A
gradient through a model is such sums chained: `terms` counts every term summed along the longest
chain (`model_terms`), and the largest entry of the reference tensor stands for the terms' size. An
entry near zero because its terms cancel (an embedding row's gradient summed over its tokens) is
held to that absolute bound, not to its own tiny size: holding it to its own size is what made a
suite pass on one host's summation order and fail on another's.
"""

from __future__ import annotations

from typing import Any

import torch

UNIT_ROUNDOFF = 2.0 ** -24  # float32, round to nearest


def gamma(terms: int) -> float:
    """Higham's gamma_n for float32: the relative error bound of a sum or dot product of n terms."""
    bound = terms * UNIT_ROUNDOFF
    assert bound < 0.5, f"{terms} terms: float32 carries no bound at that length"
    return bound / (1 - bound)


def model_terms(config: Any, tokens: int) -> int:
    """Terms summed along a causal LM's longest gradient chain: the vocabulary (the head), then per
    layer the hidden size (projections, norms), the MLP's width, the attended tokens and a head's size."""
    width = max(getattr(config, name, 0) or 0 for name in ("intermediate_size", "moe_intermediate_size"))
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.vocab_size + config.num_hidden_layers * (config.hidden_size + width + tokens + head)


def assert_float32_close(got: torch.Tensor, want: torch.Tensor, *, terms: int, msg: str = "") -> None:
    """`got` and `want` each within gamma(terms) of the exact value, relative to the larger of their own
    size and the tensor's largest entry (two float32 computations: twice the bound between them)."""
    tolerance = 2 * gamma(terms)
    scale = want.detach().abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got.double(), want.double(), rtol=tolerance, atol=tolerance * scale,
                               msg=(lambda m: f"{msg}: {m}") if msg else None)
