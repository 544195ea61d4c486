"""A float64 softmax attention with its gradients, written in numpy for the numerics tests."""

from __future__ import annotations

import numpy as np


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, allowed: np.ndarray,
              cap: float | None) -> tuple[np.ndarray, ...]:
    """out and d(sum(out * dout))/d(q, k, v) in float64, layout [heads, length, dim]; kv heads are
    shared by consecutive q heads (GQA); `allowed[q, k]` is the mask; `cap` the logits soft cap."""
    heads, kv_heads, dim = q.shape[0], k.shape[0], q.shape[2]
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    k, v = np.repeat(k, heads // kv_heads, 0), np.repeat(v, heads // kv_heads, 0)
    raw = np.einsum("hqd,hkd->hqk", q, k)
    logits = cap * np.tanh(raw / cap) if cap else raw
    logits = np.where(allowed, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("hqk,hkd->hqd", p, v)
    dp = np.einsum("hqd,hkd->hqk", dout, v)
    dlogits = p * (dp - (dp * p).sum(-1, keepdims=True))
    draw = dlogits * (1 - np.tanh(raw / cap) ** 2) if cap else dlogits
    dq = np.einsum("hqk,hkd->hqd", draw, k)
    dk = np.einsum("hqk,hqd->hkd", draw, q).reshape(kv_heads, -1, k.shape[1], dim).sum(1)
    dv = np.einsum("hqk,hqd->hkd", p, dout).reshape(kv_heads, -1, k.shape[1], dim).sum(1)
    return out, dq, dk, dv
