"""A float64 softmax attention in plain Torch (autograd gives its gradients): the reference the
Torch-tier attention tests compare the kernels against. Written from the definitions, sharing no
code with the kernel package."""

from __future__ import annotations

import torch


def allowed(q_positions: torch.Tensor, kv_len: int, *, kind: str = "causal",
            window: tuple[int | None, int | None] | None = None, q_ids: torch.Tensor | None = None,
            kv_ids: torch.Tensor | None = None) -> torch.Tensor:
    """bool [batch, q_len, kv_len]: query i (at key position q_positions[..., i]) may see key j.

    kind "causal" (j <= p), "full", or "local" with `window` (left, right): p - left <= j <= p + right;
    ids (int [batch, len]) keep pairs of equal ids only."""
    p = q_positions.reshape(-1, q_positions.shape[-1])[:, :, None].long()
    j = torch.arange(kv_len)[None, None, :]
    mask = torch.ones(p.shape[0], p.shape[1], kv_len, dtype=torch.bool)
    if kind == "causal":
        mask &= j <= p
    elif kind == "local":
        left, right = window
        if left is not None:
            mask &= j >= p - left
        if right is not None:
            mask &= j <= p + right
    if q_ids is not None:
        mask = mask & (q_ids[:, :, None] == kv_ids[:, None, :])
    return mask


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, cap: float | None = None,
              sinks: torch.Tensor | None = None) -> torch.Tensor:
    """[batch, heads, q_len, dim_v] of q [batch, heads, q_len, dim], k, v [batch, kv_heads, kv_len, dim]
    (consecutive query heads share a KV head); `allowed` [batch, q_len, kv_len]; no scaling; logits
    capped as cap * tanh(x / cap); `sinks` [heads] add exp(sink) to each denominator. Rows that see no
    key give zeros."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k)
    if cap:
        logits = cap * torch.tanh(logits / cap)
    logits = logits.masked_fill(~allowed[:, None], float("-inf"))
    top = logits.amax(-1, keepdim=True)
    if sinks is not None:
        top = torch.maximum(top, sinks.double()[None, :, None, None])
    top = torch.where(torch.isfinite(top), top, 0.0).detach()
    weights = (logits - top).exp()
    denominator = weights.sum(-1, keepdim=True)
    if sinks is not None:
        denominator = denominator + (sinks.double()[None, :, None, None] - top).exp()
    weights = weights / torch.where(denominator > 0, denominator, 1.0)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v)
