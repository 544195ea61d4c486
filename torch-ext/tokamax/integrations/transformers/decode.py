"""Attention of new tokens against a KV cache (decode steps, chunked prefill, a draft's verification,
a static cache's prompt): one call of the run-time-offset cache op, so one export serves every step.

- The step's bookkeeping (where the queries sit, each slot's segment id, the scaling of q) runs inside
  the op's own program (`torch_ops.splash_attention.cache_op`): on torch-tpu every eager op is a launch
  of its own, and a decode step's attention is a few kilobytes of work. What stays eager is padding
  k, v and the mask to the export's bucket; the step's lengths (a small int32 tensor) and the stand-ins for
  a mask or position ids not given are kept per value (`_constant`), so a model's layers and later steps
  reuse them, and a step with a mask and one without share one export.
- A dynamic cache's keys grow by a token a step; they are padded to `tokamax.splash.bucket(kv_len)`
  slots first (a copy of the cache on the Torch side), so that one export serves every step of a
  bucket. A static cache whose size is a bucket size (any multiple of 128 up to 1024, then of 256,
  512, ... as `bucket` says; e.g. 4096) is used as it is; other sizes are padded the same way.
- The new tokens are padded to `tokamax.splash.query_bucket(q_len)` (a decode step's one token
  stays one), so drafts and chunks of varying length share exports too.
- Forward only (generation runs under no_grad); gradients through a cache step raise.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ... import splash
from ...torch_ops.splash_attention import cache_op
from . import buckets

_KEPT = 4096  # small int32 tensors kept on their devices
_kept: dict[tuple, torch.Tensor] = {}
# per source tensor (the mask, the position ids: the same object for every layer of a step), the last tensor
# derived from it; the source is held, so its id is not reused while the entry stands
_derived: dict[str, tuple[torch.Tensor, int, int, torch.Tensor]] = {}


def _constant(device: torch.device, values: tuple[int, ...] | None = None, shape: tuple[int, ...] | None = None
              ) -> torch.Tensor:
    """int32 `values` (or zeros of `shape`) on `device`, made once (a host-to-device copy or a launch each time
    otherwise, per layer and step); under torch.compile made by ops in the graph (a host tensor moved became
    a lifted constant that torch-tpu's compiled mode did not pass: "identified an argument that was not
    provided: 1xint32", a static cache's generate on the chip). Never written to: the op reads its inputs."""
    if torch.compiler.is_compiling():
        if values is None:
            return torch.zeros(shape, dtype=torch.int32, device=device)
        return torch.cat([torch.full((1,), v, dtype=torch.int32, device=device) for v in values])

    def make() -> torch.Tensor:
        host = torch.tensor(values, dtype=torch.int32) if values is not None else torch.zeros(shape, dtype=torch.int32)
        return host.to(device)
    key = (device, values, shape)
    kept = _kept.get(key)
    if kept is None:
        if len(_kept) >= _KEPT:
            _kept.clear()
        kept = _kept[key] = make()
    return kept


def _once_per_step(name: str, source: torch.Tensor, size: int, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """`make()`, or what it gave for this very `source` tensor, unchanged since (its version), at `size`:
    transformers hands every layer of a step the same mask and position ids, so layers after the first
    skip the eager ops that derive the kernel's inputs from them."""
    if torch.compiler.is_compiling():
        return make()
    kept = _derived.get(name)
    if kept is not None and kept[0] is source and kept[1] == source._version and kept[2] == size:
        return kept[3]
    out = make()
    _derived[name] = (source, source._version, size, out)
    return out


def cache_step(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               position_ids: torch.Tensor | None, *, scale: float, causal: bool,
               window: tuple[int | None, int | None] | None, soft_cap: float | None,
               sinks: torch.Tensor | None) -> torch.Tensor:
    """[batch, heads, q_len, head_dim] for the unscaled `query` [batch, heads, q_len, head_dim] against the
    cache's k, v [batch, kv_heads, slots, head_dim]; `mask` [batch, <= slots] padding of the slots written."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (query, k, v, sinks)):
        raise NotImplementedError("tokamax attention: a KV cache step is forward only (the queries' slot is read "
                                  "at run time); run generation under torch.no_grad()")
    q_len, kv_len = query.shape[2], k.shape[2]
    if sinks is not None and tuple(sinks.shape) != (query.shape[1],):
        raise ValueError(f"tokamax attention: sinks (s_aux) must be [heads] = ({query.shape[1]},), "
                         f"got {tuple(sinks.shape)}")
    slots, rows = splash.bucket(kv_len), splash.query_bucket(q_len)
    source, first, mask_cols = cache_op.LAST, None, 0
    if mask is not None:
        source, mask_cols, given = cache_op.FROM_MASK, mask.shape[1], mask
        # its padded columns are never read (the op reads the first mask_cols)
        mask = _once_per_step("mask", given, slots, lambda: buckets.pad_key_ids(given.to(torch.int32), slots))
    elif position_ids is not None:
        source, given = cache_op.FROM_POSITION, position_ids
        first = _once_per_step("first", given, 1, lambda: given.reshape(-1, given.shape[-1])[0, :1].to(torch.int32))
    # stand-ins where transformers gave no mask or no position ids (never read): one export serves every step
    mask = _constant(query.device, shape=(query.shape[0], slots)) if mask is None else mask
    first = _constant(query.device, shape=(1,)) if first is None else first
    lengths = _constant(query.device, (kv_len, q_len, mask_cols, source))
    left, right = (-1, -1) if window is None else (-1 if window[0] is None else window[0],
                                                    -1 if window[1] is None else window[1])
    q, k, v = buckets.pad_length(query, rows), buckets.pad_length(k, slots), buckets.pad_length(v, slots)
    out = cache_op.splash_cache_op(q.contiguous(), k.contiguous(), v.contiguous(), mask, first, lengths,
                                   None if sinks is None else sinks.to(torch.float32).contiguous(), causal, left, right,
                                   -1.0 if soft_cap is None else float(soft_cap), float(scale))
    return out[:, :, :q_len]
