"""`splash_attention`, what users call: argument checks (each failure names the argument), the
unbatched forms lifted to a batch of one, segment ids in either form, and the choice between the
op with a mask offset fixed when tracing (differentiable; its residuals computed only where a gradient
can be asked for) and the one with a run-time offset."""

from __future__ import annotations

import torch

from .. import _checks
from .custom_ops import splash_at_op, splash_op

OP = "splash_attention"
SegmentIds = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def _check_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """q, k, v's ranks and sizes agree; returns whether the call is batched."""
    _checks.tensors(OP, q=q, k=k, v=v)
    _checks.floats(OP, q=q, k=k, v=v)
    _checks.rank(OP, "q", q, (3, 4), "[heads, q_len, head_dim] or [batch, heads, q_len, head_dim]")
    batched = q.dim() == 4
    if batched:
        _checks.rank(OP, "k", k, (3, 4), "[batch, kv_heads, kv_len, head_dim] or [batch, kv_len, head_dim]")
        if k.shape[0] != q.shape[0]:
            raise ValueError(f"tokamax {OP}: k's batch {k.shape[0]} differs from q's {q.shape[0]}")
    else:
        _checks.rank(OP, "k", k, (2, 3), "[kv_heads, kv_len, head_dim] or [kv_len, head_dim]")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"tokamax {OP}: v must match k's shape {tuple(k.shape[:-1])} but for head_dim, "
                         f"got {tuple(v.shape)}")
    heads, kv_heads = q.shape[-3], k.shape[-3] if k.dim() == q.dim() else 1
    if heads % kv_heads:
        raise ValueError(f"tokamax {OP}: q's {heads} heads must be a multiple of k's {kv_heads}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"tokamax {OP}: head_dim differs: q {q.shape[-1]}, k {k.shape[-1]}")
    return batched


def _segment_pair(segment_ids: SegmentIds | None, q: torch.Tensor, k: torch.Tensor, batched: bool
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(q_ids, kv_ids) from one tensor (q_len == kv_len) or a pair, checked: int32, [batch?, len]."""
    if segment_ids is None:
        return None, None
    q_len, kv_len = q.shape[-2], k.shape[-2]
    lead = tuple(q.shape[:1]) if batched else ()
    if isinstance(segment_ids, torch.Tensor):
        if q_len != kv_len:
            raise ValueError(f"tokamax {OP}: one segment_ids tensor needs q_len == kv_len, got {q_len} and {kv_len}; "
                             "pass (q_segment_ids, kv_segment_ids)")
        q_ids = kv_ids = segment_ids
    elif isinstance(segment_ids, tuple) and len(segment_ids) == 2:
        q_ids, kv_ids = segment_ids
    else:
        raise TypeError(f"tokamax {OP}: segment_ids must be a tensor or a (q_ids, kv_ids) pair, "
                        f"got {type(segment_ids).__name__}")
    _checks.tensors(OP, q=q, segment_ids=q_ids, kv_segment_ids=kv_ids)
    for name, ids, length in (("segment_ids", q_ids, q_len), ("kv_segment_ids", kv_ids, kv_len)):
        _checks.dtype(OP, name, ids, (torch.int32,))
        layout = "[batch, len]" if batched else "[len]"
        _checks.shape(OP, name, ids, (*lead, length), layout)
    return q_ids, kv_ids


def _window(window: tuple[int | None, int | None] | None) -> tuple[int, int]:
    if window is None:
        return -1, -1
    if not (isinstance(window, tuple) and len(window) == 2):
        raise TypeError(f"tokamax {OP}: window must be a (left, right) pair, got {window!r}")
    left, right = window
    if left is None and right is None:
        raise ValueError(f"tokamax {OP}: a window needs a left or a right size")
    for side in window:
        if side is not None and (not isinstance(side, int) or side < 0):
            raise ValueError(f"tokamax {OP}: window sizes must be ints >= 0 (or None), got {window!r}")
    return -1 if left is None else left, -1 if right is None else right


def _offset(q_offset: int | torch.Tensor, q: torch.Tensor) -> int | torch.Tensor:
    if isinstance(q_offset, torch.Tensor):
        _checks.tensors(OP, q=q, q_offset=q_offset)
        _checks.dtype(OP, "q_offset", q_offset, (torch.int32,))
        if q_offset.numel() != 1:
            raise ValueError(f"tokamax {OP}: a q_offset tensor holds one value, got shape {tuple(q_offset.shape)}")
        return q_offset.reshape(1)
    if not isinstance(q_offset, int) or isinstance(q_offset, bool):
        raise TypeError(f"tokamax {OP}: q_offset must be an int or an int32 tensor, got {type(q_offset).__name__}")
    return q_offset


def splash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                     window: tuple[int | None, int | None] | None = None, segment_ids: SegmentIds | None = None,
                     q_offset: int | torch.Tensor = 0, soft_cap: float | None = None,
                     sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Splash attention (upstream's kernel), softmax(q k^T, masked) v with no scaling, at any length.

    q [heads, q_len, head_dim], k, v [kv_heads, kv_len, head_dim] or [kv_len, head_dim] (multi-query),
    or all with a leading batch dimension (one kernel call for the batch); q's heads a multiple of k's
    (grouped-query attention); any q_len and kv_len (padded inside, the padding masked).

    Mask: causal (default) or full (`causal=False`), and within a local window `(left, right)` of keys
    each side of a query if given (None: unbounded); with causal the window's right side is clipped to
    0 (keys in [p - left, p]), a two-sided window needs `causal=False`. Query i sits at key position
    `q_offset + i` (upstream's mask offset; 0: top-left aligned, as torch's SDPA). `q_offset` may be an
    int32 tensor of one value, read at run time: one export then serves every value (a KV cache's fill
    level), forward only. `segment_ids`
    (int32 [batch?, len]; one tensor when q_len == kv_len, else a (q_ids, kv_ids) pair) keeps attention
    within equal ids (padding, packed documents); `soft_cap` caps logits as `cap * tanh(x / cap)`;
    `sinks` (float [heads], differentiable) adds a per-head sink logit to each softmax denominator.
    Differentiable in q, k, v and sinks when `q_offset` is an int.
    """
    batched = _check_layout(q, k, v)
    q_ids, kv_ids = _segment_pair(segment_ids, q, k, batched)
    left, right = _window(window)
    offset = _offset(q_offset, q)
    if sinks is not None:
        _checks.tensors(OP, q=q, sinks=sinks)
        _checks.shape(OP, "sinks", sinks, (q.shape[-3],), "[heads]")
        sinks = sinks.to(torch.float32).contiguous()
    if soft_cap is not None and not soft_cap > 0:
        raise ValueError(f"tokamax {OP}: soft_cap must be positive, got {soft_cap}")
    cap = float(soft_cap) if soft_cap is not None else -1.0
    if not batched:
        q, k, v = q[None], k[None], v[None]
        q_ids, kv_ids = (None if ids is None else ids[None] for ids in (q_ids, kv_ids))
    tensors = [t if t is None else t.contiguous() for t in (q, k, v, q_ids, kv_ids)]
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, sinks) if t is not None)
    if isinstance(offset, torch.Tensor):
        if wants_grad:
            raise NotImplementedError(f"tokamax {OP}: a run-time q_offset (a tensor) is forward only; pass an int "
                                      "to differentiate, or run under torch.no_grad()")
        out = splash_at_op(*tensors, offset, sinks, causal, left, right, cap)
    else:
        # the backward's residuals only where a gradient can be asked for (inference, prefill, no_grad: none)
        out, _ = splash_op(*tensors, sinks, causal, left, right, offset, cap, wants_grad)
    return out if batched else out[0]
