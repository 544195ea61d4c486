"""DeepSeek-V4 compressor projection on Torch tensors: `proj_and_save_state` through upstream's
public op (`ops.proj_and_save_state`, Pallas implementation, upstream's config choice), forward
only, as upstream's Torch op: each token's f32 state `[kv, score + ape]` from `hidden_states @
wkv_wgate`, written into a paged state cache (int32 words or uint8 slabs).

TPU only (upstream runs it on v6e and newer): JAX's Pallas TPU interpreter cannot run the kernel,
so CPU tensors get a clear refusal; meta / fake tensors trace through a fake kernel.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["proj_and_save_state", "proj_and_save_state_op"]

_OP = "proj_and_save_state"
_NO_CPU = ("the kernel loads its f32 accumulator through a `ref.reshape(-1, 128)` view, and the interpreter's "
           "loads resolve only integer/slice indexers: AttributeError: 'ReshapeTransform' object has no attribute "
           "'indices'")


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(upstream="ProjAndSaveState", op=_OP)
def _proj_jax(hidden_states: jax.Array, wkv_wgate: jax.Array, ape: jax.Array, positions: jax.Array,
              slot_mapping: jax.Array, cache: jax.Array, compress_ratio: int) -> jax.Array:
    return ops.proj_and_save_state(hidden_states, wkv_wgate, ape, positions, slot_mapping, cache,
                                   compress_ratio=compress_ratio, implementation="mosaic_tpu")


proj_and_save_state_op = register(_OP, _proj_jax, no_cpu=_NO_CPU)


# ---- Fake kernel that takes symbolic sizes: the cache keeps its shape and dtype ----------------
@proj_and_save_state_op.register_fake
def _proj_fake(hidden_states: torch.Tensor, wkv_wgate: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
               slot_mapping: torch.Tensor, cache: torch.Tensor, compress_ratio: int) -> torch.Tensor:
    return torch.empty_like(cache)


# ---- What users call ---------------------------------------------------------------------------
def _check(hidden_states: torch.Tensor, wkv_wgate: torch.Tensor, ape: torch.Tensor, positions: torch.Tensor,
           slot_mapping: torch.Tensor, cache: torch.Tensor, compress_ratio: int) -> None:
    op = _OP
    _checks.tensors(op, hidden_states=hidden_states, wkv_wgate=wkv_wgate, ape=ape, positions=positions,
                    slot_mapping=slot_mapping, cache=cache)
    _checks.positive(op, "compress_ratio", compress_ratio)
    _checks.floats(op, hidden_states=hidden_states, wkv_wgate=wkv_wgate, ape=ape)
    _checks.rank(op, "hidden_states", hidden_states, (2,), "[tokens, hidden_size]")
    _checks.rank(op, "wkv_wgate", wkv_wgate, (2,), "[hidden_size, 2 * state_width]")
    _checks.same(op, "hidden_size", hidden_states=hidden_states.shape[1], wkv_wgate=wkv_wgate.shape[0])
    if hidden_states.shape[1] % 128 != 0:
        raise ValueError(f"tokamax {op}: hidden_size must be a multiple of 128 (the kernel's k tiles), "
                         f"got {hidden_states.shape[1]}")
    if wkv_wgate.shape[1] % 2 != 0:
        raise ValueError(f"tokamax {op}: wkv_wgate must be [hidden_size, 2 * state_width] (an even width), "
                         f"got shape {tuple(wkv_wgate.shape)}")
    state_width = wkv_wgate.shape[1] // 2
    _checks.shape(op, "ape", ape, (compress_ratio, state_width), "[compress_ratio, state_width]")
    tokens = hidden_states.shape[0]
    for name, t in (("positions", positions), ("slot_mapping", slot_mapping)):
        _checks.dtype(op, name, t, (torch.int32,))
        _checks.shape(op, name, t, (tokens,), "[tokens]")
    words = cache.dtype == torch.int32 and cache.dim() == 3
    slabs = cache.dtype == torch.uint8 and cache.dim() == 4 and cache.shape[2] == 4
    if not (words or slabs):
        raise ValueError(f"tokamax {op}: cache must be int32 [pages, page_size, lanes] or uint8 "
                         f"[pages, page_size, 4, lanes], got {cache.dtype} {tuple(cache.shape)}")
    lanes = cache.shape[-1]
    if lanes % 128 != 0 or state_width % lanes != 0:
        raise ValueError(f"tokamax {op}: the cache's lane count {lanes} must be a multiple of 128 that divides "
                         f"state_width ({state_width})")
    rows_per_token = 2 * state_width // lanes  # a token's 2 * state_width f32 values, `lanes` words per row
    if cache.shape[1] % rows_per_token != 0:
        raise ValueError(f"tokamax {op}: the cache's page_size {cache.shape[1]} must be a multiple of the "
                         f"{rows_per_token} rows a token's state takes")


def proj_and_save_state(hidden_states: torch.Tensor, wkv_wgate: torch.Tensor, ape: torch.Tensor,
                        positions: torch.Tensor, slot_mapping: torch.Tensor, cache: torch.Tensor, *,
                        compress_ratio: int) -> torch.Tensor:
    """Projects DeepSeek-V4 compressor states and writes them into the state cache (upstream's
    public op, forward only): returns the updated cache.

    hidden_states [tokens, hidden_size] (hidden_size a multiple of 128), wkv_wgate
    [hidden_size, 2 * state_width] and ape [compress_ratio, state_width], all bf16 or all f32;
    positions int32 [tokens] (token t adds APE row positions[t] % compress_ratio); slot_mapping
    int32 [tokens], each token's first cache row (page * page_size + row; negative: skip it);
    cache int32 [pages, page_size, lanes] or uint8 [pages, page_size, 4, lanes], lanes a
    multiple of 128 dividing state_width. A token's f32 state takes 2 * state_width / lanes rows.

    Upstream's kernel writes the cache through an input/output alias (in place under JAX buffer
    donation); this op donates nothing: it returns a NEW cache tensor and leaves `cache`
    unchanged, so assign the result back. TPU only (v6e and newer); CPU tensors are refused, meta
    tensors trace.
    """
    _check(hidden_states, wkv_wgate, ape, positions, slot_mapping, cache, compress_ratio)
    return proj_and_save_state_op(hidden_states.contiguous(), wkv_wgate.contiguous(), ape.contiguous(),
                                  positions.contiguous(), slot_mapping.contiguous(), cache.contiguous(),
                                  compress_ratio)
