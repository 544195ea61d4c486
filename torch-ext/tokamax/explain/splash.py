"""Splash attention's choices (`splash.attend`): each kernel's blocks (the forward's, the fused backward's), as
`splash.fixed_offset` makes them: upstream's Op's config for the call (its tuned table or its heuristics), kept
where its VMEM fits the chip's scoped limit, else the fitting blocks `splash.cost` times least
(`splash.blocks.fitted_forward` / `fitted_backward`), or the blocks a caller asked for, checked."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .. import roofline
from ..splash import _upstream, blocks, cost
from ..splash.blocks import Blocks
from ..splash.lengths import padded
from ..splash.masks import MaskSpec
from .report import Choice, Explanation
from .target import device_kind, spec

S = jax.ShapeDtypeStruct
_FIELDS = blocks.FIELDS


def _source(ba: Any, upstream: Blocks, chosen: Blocks, asked: Blocks | None, kernel: str, head_dim: int,
            head_dim_v: int, segments: bool) -> tuple[str, str]:
    if asked is not None:
        return "given", f"{kernel}_blocks asked for, checked against the VMEM model"
    data = ba.cached_autotuning_data
    origin = "upstream's tuned table" if data is not None and data.items() else "upstream's heuristics"
    if chosen == upstream:
        return origin, "upstream's blocks fit the chip's scoped VMEM"
    need = blocks.vmem_bytes(kernel, upstream, head_dim, head_dim_v, segments)
    return "the package's blocks", (f"{origin} gave {tuple(upstream)}, {need >> 10} KiB of VMEM, past "
                                    f"{blocks.VMEM_SHARE:.0%} of the scoped limit: the fitting blocks of least time")


def explain(chip: str, q: Any, k: Any, v: Any, q_ids: Any = None, kv_ids: Any = None, sinks: Any = None, *,
            spec_: MaskSpec | None = None, offset: int = 0, soft_cap: float | None = None,
            forward_blocks: Blocks | None = None, backward_blocks: Blocks | None = None, grad: bool = True,
            **kwargs: Any) -> Explanation:
    """`splash.attend(q, k, v, q_ids, kv_ids, sinks, spec=..., ...)` on the chip; `grad`: the backward's blocks too."""
    mask = kwargs.pop("spec", spec_)
    if kwargs:
        raise TypeError(f"tokamax explain splash: unexpected arguments {sorted(kwargs)}")
    if not isinstance(mask, MaskSpec):
        raise ValueError(f"tokamax explain splash: spec must be a splash.MaskSpec (as splash.attend takes), got "
                         f"{mask!r}")
    q, k, v = spec(q), spec(k), spec(v)
    if getattr(q, "ndim", None) != 4 or getattr(k, "ndim", None) not in (3, 4) or getattr(v, "ndim", None) != k.ndim:
        raise ValueError(f"tokamax explain splash: q must be [batch, heads, q_len, head_dim] and k, v [batch, "
                         f"kv_heads, kv_len, head_dim] (or [batch, kv_len, head_dim]), got {getattr(q, 'shape', q)}, "
                         f"{getattr(k, 'shape', k)}, {getattr(v, 'shape', v)}")
    _, heads, q_len, head_dim = q.shape
    mqa, kv_len, head_dim_v = k.ndim == 3, k.shape[-2], v.shape[-1]
    kv_heads = 1 if mqa else k.shape[1]
    q_pad, kv_pad = padded(q_len), padded(kv_len)
    segmented = q_ids is not None or (q_pad, kv_pad) != (q_len, kv_len)  # `padding.segments`
    ids = (S((q_pad,), jnp.int32), S((kv_pad,), jnp.int32)) if segmented else None
    q1 = S((heads, q_pad, head_dim), q.dtype)
    k1, v1 = (S((kv_pad, x.shape[-1]), x.dtype) if mqa else S((kv_heads, kv_pad, x.shape[-1]), x.dtype) for x in (k, v))
    sinks = spec(sinks)
    args = _upstream.op_arguments(ids, sinks, mqa, soft_cap)
    stand_in = mask.stand_in((q_pad, kv_pad), offset)
    on = roofline.chip()
    sizes = (q_pad, kv_pad, head_dim, head_dim_v, heads, kv_heads, ids is not None)
    choices = []
    ba = _upstream.bind_as_public(_upstream.forward_op(), stand_in, q1, k1, v1, **args, return_residuals=True)
    bound = [("forward", ba, blocks.fitted_forward, forward_blocks, cost.forward)]
    if grad:
        stats, out = S((heads, q_pad), jnp.float32), S((heads, q_pad, head_dim_v), q.dtype)
        ba_vjp = _upstream.vjp_op().bind((stats, stats), out, out, q1, k1, v1, mask=stand_in, **args)
        bound.append(("backward", ba_vjp, blocks.fitted_backward, backward_blocks, cost.backward))
    for kernel, b, fitted, asked, timed in bound:
        config = b.default_config
        upstream = Blocks(*(getattr(config, f) for f in _FIELDS[kernel][:2]),
                          getattr(config, _FIELDS[kernel][2]) or getattr(config, _FIELDS[kernel][1]))
        taken = fitted(config, *sizes, asked)
        chosen = Blocks(*(getattr(taken, f) for f in _FIELDS[kernel]))
        source, note = _source(b, upstream, chosen, asked, kernel, head_dim, head_dim_v, ids is not None)
        seconds = timed(heads, kv_heads, q_len, kv_len, head_dim, head_dim_v, itemsize=jnp.dtype(q.dtype).itemsize,
                        spec=mask, offset=offset, at=chosen).seconds(on)
        choices.append(Choice(kernel, source, dict(zip(_FIELDS[kernel], chosen, strict=True)),
                              vmem_bytes=blocks.vmem_bytes(kernel, chosen, head_dim, head_dim_v, ids is not None),
                              seconds=seconds, note=note))
    return Explanation("splash.attend", chip, device_kind(chip),
                       f"upstream's splash kernel at {q_pad} queries x {kv_pad} keys (padded)", tuple(choices))
