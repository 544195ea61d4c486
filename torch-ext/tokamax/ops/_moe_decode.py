"""Upstream's fused MoE decode (`_src.ops.experimental.fused_moe_decode.api.fused_moe_decode`), checked
first: a batch whose VMEM the compiler cannot give is refused here, naming the op and the tokens.

The kernel keeps the shared expert, a ring of at least three routed-weight slots and every token's
buffers in VMEM at once; upstream's `vmem_bytes` counts them ("the token-proportional buffers bound the
rows one call takes") but nothing upstream bounds the rows. Mosaic's temporaries come on top, in proportion to the rows:
at DeepSeek-V3's shapes on TPU7x, 256 tokens declare 78.4 MiB and the compiler used 83.07 MiB ("of
63.94M vmem"), 112 declare 62.4 MiB and it used 64.44 MiB (about 19 KiB a row both times); 96 compile.
An implementation list that also names another implementation goes on to it, as upstream's does.
"""

from __future__ import annotations

import importlib
from typing import Any

_API = "._ported._src.ops.experimental.fused_moe_decode"
TEMPORARY_ROW_BYTES = 20 << 10  # Mosaic's temporaries beyond the declared buffers, per padded row (19 KiB measured)
RESERVED = 64 << 10  # VMEM the compiler keeps back (it offers 63.94 MiB of TPU7x's 64)
ROW_ALIGN = 16  # the kernel pads tokens to whole bf16 tiles


def _module(name: str) -> Any:
    return importlib.import_module(f"{_API}.{name}", __package__.rsplit(".", 1)[0])


def _declared(tokens: int, h: int, i: int, i_s: int, experts: int, n_ranks: int, dtype: Any, config: Any) -> int:
    """The VMEM the call declares (upstream's `vmem_bytes`, with the config's block width and depth)."""
    kernel = _module("fused_moe_decode_kernel")
    m = tokens + (-tokens) % ROW_ALIGN
    itemsize = dtype.itemsize
    ib, nb = kernel.plan_weight_ring(m, h, i, i_s, experts, n_ranks, dtype, config.i_block,
                                     num_buffers=config.num_buffers, q_block=config.q_block)
    return (nb * kernel._unit_bytes(h, i if ib is None else ib, itemsize)
            + kernel._token_side_bytes(m, h, i_s, experts, n_ranks, itemsize, q_block=config.q_block))


def _needed(tokens: int, *shape: Any) -> int:
    """What the compiler needs: the declared VMEM and its temporaries."""
    return _declared(tokens, *shape) + (tokens + (-tokens) % ROW_ALIGN) * TEMPORARY_ROW_BYTES


def _vmem_check(implementation: Any, i_block: int | None, hidden: Any, w2: Any, shared_w2: Any, w1: Any,
                n_ranks: int) -> Any:
    """`implementation` unchanged when the kernel's VMEM fits; else the other implementations, or a refusal."""
    import jax.experimental.pallas.tpu as pltpu

    mosaic = _module("pallas_mosaic_tpu")
    chosen = ("mosaic_tpu", "xla") if implementation is None else (
        (implementation,) if isinstance(implementation, str) else tuple(implementation))
    ops = [i for i in chosen if i == "mosaic_tpu" or isinstance(i, mosaic.PallasMosaicTpuFusedMoeDecode)]
    if not ops:
        return implementation
    config = next((op.config for op in ops if not isinstance(op, str) and op.config is not None), None)
    config = config or mosaic.Config()
    if i_block is not None:
        config = mosaic.Config(i_block=i_block)
    capacity = pltpu.get_tpu_info().vmem_capacity_bytes - RESERVED
    tokens, h = hidden.shape
    experts, i, _ = w2.shape
    shape = (h, i, shared_w2.shape[0], experts, n_ranks, w1.dtype, config)
    if _needed(tokens, *shape) <= capacity:
        return implementation
    others = tuple(x for x in chosen if x not in ops)
    if others:
        return others
    most = next((t for t in range(tokens - tokens % ROW_ALIGN, 0, -ROW_ALIGN)
                 if _needed(t, *shape) <= capacity), 0)
    raise NotImplementedError(
        f"tokamax fused_moe_decode: {tokens} tokens (hidden's rows) need "
        f"{_needed(tokens, *shape) / 2**20:.1f} MiB of VMEM with these experts (hidden {h}, "
        f"intermediate {i}, shared {shared_w2.shape[0]}, {experts} local, {w1.dtype}), above the "
        f"{capacity / 2**20:.2f} MiB this chip's compiler offers; at most {most} tokens per call here: split the batch")


def fused_moe_decode(rank: Any, hidden: Any, w1: Any, w2: Any, w1_scale: Any, w2_scale: Any, shared_w1: Any,
                     shared_w1_scale: Any, shared_w2: Any, shared_w2_scale: Any, shared_gate_weight: Any,
                     topk_weights: Any, topk_ids: Any, *, n_ranks: int = 1, expert_start: Any = None,
                     scatter_rows: bool = False, routed_scale: float = 1.0, axis_name: str | None = None,
                     i_block: int | None = None, implementation: Any = None) -> Any:
    """Upstream's fused MoE decode (routed experts, the shared expert and the all-reduce in one kernel)."""
    implementation = _vmem_check(implementation, i_block, hidden, w2, shared_w2, w1, n_ranks)
    return _module("api").fused_moe_decode(
        rank, hidden, w1, w2, w1_scale, w2_scale, shared_w1, shared_w1_scale, shared_w2, shared_w2_scale,
        shared_gate_weight, topk_weights, topk_ids, n_ranks=n_ranks, expert_start=expert_start,
        scatter_rows=scatter_rows, routed_scale=routed_scale, axis_name=axis_name, i_block=i_block,
        implementation=implementation)
