"""The operands splash's entry points take, checked before anything is traced (`tokamax.checks`: static, free under
jit), the same rules as the Torch op's: q [batch, heads, q_len, head_dim]; k, v [batch, kv_heads, kv_len, head_dim]
or [batch, kv_len, head_dim] (multi-query), one float dtype (bfloat16 or float32); segment ids int32 [batch, q_len]
and [batch, kv_len], both or neither; sinks [heads]; a soft cap > 0. Ring attention's entry checks the same."""

from __future__ import annotations

from typing import Any

from .. import checks
from .masks import MaskSpec

Q_LAYOUT = "[batch, heads, q_len, head_dim]"
KV_LAYOUT = "[batch, kv_heads, kv_len, head_dim] or [batch, kv_len, head_dim] (multi-query)"


def offset(op: str, value: Any) -> None:
    """A mask offset fixed when tracing: a Python int."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"tokamax {op}: offset must be an int (fixed when tracing; splash.attend_at takes one read at "
                        f"run time), got {type(value).__name__}")


def check(op: str, q: Any, k: Any, v: Any, q_ids: Any = None, kv_ids: Any = None, sinks: Any = None, *,
          soft_cap: float | None = None, spec: Any = None) -> None:
    """Refuses, naming `op` and the argument, what the kernel cannot take; ring attention passes no spec."""
    checks.rank(op, "q", q, (4,), Q_LAYOUT)
    checks.rank(op, "k", k, (3, 4), KV_LAYOUT)
    checks.rank(op, "v", v, (k.ndim,), f"of k's rank ({k.ndim}): {KV_LAYOUT}")
    checks.floats(op, q=q, k=k, v=v)
    batch, heads, q_len, head_dim = q.shape
    checks.same(op, "the batch", q=batch, k=k.shape[0], v=v.shape[0])
    checks.same(op, "the KV length", k=k.shape[-2], v=v.shape[-2])
    if k.ndim == 4:
        checks.same(op, "the KV heads", k=k.shape[1], v=v.shape[1])
        if heads % k.shape[1]:
            raise ValueError(f"tokamax {op}: q's heads ({heads}) must be a multiple of k's ({k.shape[1]})")
    checks.same(op, "the head dim", q=head_dim, k=k.shape[-1])
    if (q_ids is None) != (kv_ids is None):
        raise ValueError(f"tokamax {op}: q_ids and kv_ids go together (both or neither), got "
                         f"{'q_ids' if kv_ids is None else 'kv_ids'} alone")
    if q_ids is not None:
        for name, ids, length in (("q_ids", q_ids, q_len), ("kv_ids", kv_ids, k.shape[-2])):
            checks.shape(op, name, ids, (batch, length), "[batch, len]")
            checks.int32(op, name, ids)
    if sinks is not None:
        checks.shape(op, "sinks", sinks, (heads,), "[heads]")
        checks.floats(op, sinks=sinks)
    checks.positive(op, "soft_cap", soft_cap, optional=True)
    if spec is not None and not isinstance(spec, MaskSpec):
        raise TypeError(f"tokamax {op}: spec must be a splash.MaskSpec (MaskSpec.of(causal, window)), got "
                        f"{type(spec).__name__}")


def empty(op: str, q: Any, k: Any) -> bool:
    """No query (a zero batch or q_len): the result is empty, nothing to run. No key for a query is refused: a
    softmax over no key has no value."""
    if k.shape[-2] == 0 and q.shape[0] * q.shape[2]:
        raise ValueError(f"tokamax {op}: k and v must hold at least one key for the {q.shape[2]} queries, got "
                         f"kv_len 0 (k {tuple(k.shape)})")
    return q.shape[0] == 0 or q.shape[2] == 0
