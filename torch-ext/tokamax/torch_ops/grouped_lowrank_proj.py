"""DeepSeek-V4's fused reverse-RoPE `wo_a` output projection on Torch tensors, through upstream's public
`grouped_lowrank_proj`: undo the RoPE on each head's trailing channels, then project each group of 8
heads with its own block of the fp8 `wo_a` (activations optionally quantized to fp8 per token and
group). Forward only (upstream registers no backward). Upstream runs these kernels on TPU7x only, so
they are traced and, on CPU tensors, run in Pallas TPU interpret mode as TPU7x.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["grouped_lowrank_proj", "grouped_lowrank_proj_op"]

_CHIP = "v7x"  # upstream's `supported_on`: TPU7x (generation 7) and newer only
_LANE = 128
_HEADS_PER_GROUP = 8  # DeepSeek-V4's; upstream's kernel relies on it


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(_CHIP)
def _proj_jax(x: jax.Array, positions: jax.Array, cos_sin_cache: jax.Array, wo_a: jax.Array,
              wo_a_scale: jax.Array, inverse: bool, quantize_activations: bool) -> jax.Array:
    return ops.grouped_lowrank_proj(x, positions, cos_sin_cache, wo_a, wo_a_scale, inverse=inverse,
                                    quantize_activations=quantize_activations, implementation="mosaic_tpu")


grouped_lowrank_proj_op = register("grouped_lowrank_proj", _proj_jax)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@grouped_lowrank_proj_op.register_fake
def _proj_fake(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, wo_a: torch.Tensor,
               wo_a_scale: torch.Tensor, inverse: bool, quantize_activations: bool) -> torch.Tensor:
    return x.new_empty((x.shape[0], wo_a.shape[1]))


# ---- What users call ---------------------------------------------------------------------------

def grouped_lowrank_proj(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, wo_a: torch.Tensor,
                         wo_a_scale: torch.Tensor, *, inverse: bool = True, quantize_activations: bool = True
                         ) -> torch.Tensor:
    """RoPE (by default the inverse rotation) on each head's trailing `rotary_dim` channels, then
    group g's `8 * head_dim` features times `wo_a[:, g*R:(g+1)*R]`, scaled per column by `wo_a_scale`.

    x bf16 [tokens, groups * 8, head_dim], head_dim a multiple of 128 above 128; positions int32
    [tokens], each in [0, max_pos) (not bounds checked); cos_sin_cache float32 [max_pos, rotary_dim],
    rows `[cos | sin]`, rotary_dim even and at most 128; wo_a float8_e4m3fn [8 * head_dim, groups * R];
    wo_a_scale float32 [groups * R]. `quantize_activations` quantizes the roped activations to fp8 (one
    scale per token and group) so both matmul operands are fp8. Returns bf16 [tokens, groups * R].

    Token counts whose tiles upstream's kernel cannot lower (the largest divisor up to 128, or up to
    1024, neither a multiple of 8 nor all the tokens, e.g. 200) raise upstream's NotImplementedError.
    """
    op = "grouped_lowrank_proj"
    _checks.tensors(op, x=x, positions=positions, cos_sin_cache=cos_sin_cache, wo_a=wo_a, wo_a_scale=wo_a_scale)
    _checks.dtype(op, "x", x, (torch.bfloat16,))
    _checks.rank(op, "x", x, (3,), "[tokens, groups * 8, head_dim]")
    tokens, heads, head_dim = x.shape
    if head_dim % _LANE != 0 or head_dim == _LANE or head_dim == 0:
        raise ValueError(f"tokamax {op}: x's head_dim must be a multiple of {_LANE} above {_LANE} (upstream's "
                         f"kernel cannot lower a head without NoPE channels), got shape {tuple(x.shape)}")
    if heads % _HEADS_PER_GROUP != 0 or heads == 0:
        raise ValueError(f"tokamax {op}: x's heads must be a positive multiple of {_HEADS_PER_GROUP} (groups of "
                         f"{_HEADS_PER_GROUP}), got shape {tuple(x.shape)}")
    _checks.rope_tables(op, tokens, positions, cos_sin_cache, _LANE)
    _checks.dtype(op, "wo_a", wo_a, (torch.float8_e4m3fn,))
    _checks.rank(op, "wo_a", wo_a, (2,), "[8 * head_dim, groups * R]")
    if wo_a.shape[0] != _HEADS_PER_GROUP * head_dim:
        raise ValueError(f"tokamax {op}: wo_a must have 8 * head_dim = {_HEADS_PER_GROUP * head_dim} rows, got "
                         f"shape {tuple(wo_a.shape)}")
    groups = heads // _HEADS_PER_GROUP
    if wo_a.shape[1] % groups != 0:
        raise ValueError(f"tokamax {op}: wo_a's {wo_a.shape[1]} columns must be a multiple of the {groups} head "
                         f"groups")
    _checks.dtype(op, "wo_a_scale", wo_a_scale, (torch.float32,))
    _checks.shape(op, "wo_a_scale", wo_a_scale, (wo_a.shape[1],), "[groups * R]")
    for name, flag in (("inverse", inverse), ("quantize_activations", quantize_activations)):
        if not isinstance(flag, bool):
            raise TypeError(f"tokamax {op}: {name} must be a bool, got {flag!r}")
    return grouped_lowrank_proj_op(x.contiguous(), positions.contiguous(), cos_sin_cache.contiguous(),
                                   wo_a.contiguous(), wo_a_scale.contiguous(), inverse, quantize_activations)
