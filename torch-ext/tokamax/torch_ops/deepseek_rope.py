"""DeepSeek-V4 RoPE on Torch tensors through upstream's public `deepseek_rope`: the GPT-J (interleaved)
rotation of each head's trailing `rotary_dim` channels (`mode="rope"`), after a per-head RMSNorm
(`"qnorm_rope"`), or followed by per-row quantization (`"rope_quant"`, e.g. to fp8). Forward only
(upstream registers no backward). Upstream runs these kernels on TPU7x only, so they are traced and,
on CPU tensors, run in Pallas TPU interpret mode as TPU7x.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["deepseek_rope", "deepseek_rope_op", "deepseek_rope_quant_op"]

_CHIP = "v7x"  # upstream's `supported_on`: TPU7x (generation 7) and newer only
_LANE = 128
_MODES = ("rope", "qnorm_rope", "rope_quant")
# The floating dtypes Torch and JAX share; upstream quantizes to any floating dtype (fp8 by default).
_QUANT_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
                 torch.bfloat16, torch.float16, torch.float32)


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing(_CHIP)
def _rope_jax(x: jax.Array, positions: jax.Array, cos_sin_cache: jax.Array, mode: str, inverse: bool,
              eps: float) -> jax.Array:
    """The "rope" and "qnorm_rope" modes: one array of x's shape and dtype."""
    return ops.deepseek_rope(x, positions, cos_sin_cache, mode=mode, inverse=inverse, eps=eps,
                             implementation="mosaic_tpu")


@chip_for_tracing(_CHIP)
def _rope_quant_jax(x: jax.Array, positions: jax.Array, cos_sin_cache: jax.Array, inverse: bool,
                    quant_dtype: str) -> tuple[jax.Array, jax.Array]:
    """The "rope_quant" mode: (q in quant_dtype, float32 per-row scales)."""
    q, scales = ops.deepseek_rope(x, positions, cos_sin_cache, mode="rope_quant", inverse=inverse,
                                  quant_dtype=jnp.dtype(quant_dtype), implementation="mosaic_tpu")
    return q, scales


deepseek_rope_op = register("deepseek_rope", _rope_jax)
deepseek_rope_quant_op = register("deepseek_rope_quant", _rope_quant_jax)


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
@deepseek_rope_op.register_fake
def _rope_fake(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, mode: str, inverse: bool,
               eps: float) -> torch.Tensor:
    return torch.empty_like(x)


@deepseek_rope_quant_op.register_fake
def _rope_quant_fake(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, inverse: bool,
                     quant_dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=getattr(torch, quant_dtype)), x.new_empty(x.shape[:-1], dtype=torch.float32)


# ---- What users call ---------------------------------------------------------------------------

def _quant_dtype(op: str, quant_dtype: torch.dtype | str | None) -> torch.dtype:
    """The quantized dtype as a torch dtype (default float8_e4m3fn, upstream's)."""
    if quant_dtype is None:
        return torch.float8_e4m3fn
    dtype = getattr(torch, quant_dtype, None) if isinstance(quant_dtype, str) else quant_dtype
    if dtype not in _QUANT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in _QUANT_DTYPES)
        raise TypeError(f"tokamax {op}: quant_dtype must be one of {names}, got {quant_dtype!r}")
    return dtype


def deepseek_rope(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, *, mode: str = "rope",
                  inverse: bool = False, eps: float = 1e-6, quant_dtype: torch.dtype | str | None = None
                  ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V4's RoPE of the trailing `rotary_dim` channels of each head (GPT-J pairs).

    x [tokens, head_dim] or [tokens, heads, head_dim], bf16 or f32, head_dim a multiple of 128;
    positions int32 [tokens], each in [0, max_pos) (the kernels do not bounds check them);
    cos_sin_cache float32 [max_pos, rotary_dim], rows `[cos | sin]`, rotary_dim even and at most
    128. `inverse` negates sin (the transposed rotation).

    - mode "rope": the rotation; returns x's shape and dtype.
    - mode "qnorm_rope": a per-head RMSNorm without weight (epsilon `eps`) over the whole head, then
      the rotation; x [tokens, heads, head_dim] with head_dim above 128.
    - mode "rope_quant": the rotation in float32, then per-row quantization to `quant_dtype`
      (default float8_e4m3fn); head_dim 128 (with a 2-D x, a multiple of 128 tokens). Returns
      `(q, scales)`: q of x's shape in quant_dtype, float32 scales [x.shape[:-1]], q * scales ~ the
      rotation.

    x is not modified: upstream's kernel writes its result into x's buffer, but the op does not donate
    x, so XLA hands the kernel a copy.
    """
    op = "deepseek_rope"
    _checks.tensors(op, x=x, positions=positions, cos_sin_cache=cos_sin_cache)
    _checks.choice(op, "mode", mode, _MODES)
    _checks.dtype(op, "x", x, _checks.FLOATS)
    _checks.rank(op, "x", x, (2, 3), "[tokens, head_dim] or [tokens, heads, head_dim]")
    if x.shape[-1] % _LANE != 0 or x.shape[-1] == 0:
        raise ValueError(f"tokamax {op}: x's head_dim must be a positive multiple of {_LANE}, got shape "
                         f"{tuple(x.shape)}")
    _checks.rope_tables(op, x.shape[0], positions, cos_sin_cache, _LANE)
    if not isinstance(inverse, bool):
        raise TypeError(f"tokamax {op}: inverse must be a bool, got {inverse!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"tokamax {op}: eps must be a non-negative float, got {eps!r}")
    if mode != "rope_quant" and quant_dtype is not None:
        raise ValueError(f"tokamax {op}: quant_dtype applies to mode 'rope_quant' only, got {quant_dtype!r} with "
                         f"mode {mode!r}")
    if mode == "qnorm_rope":
        _checks.rank(op, "x", x, (3,), "[tokens, heads, head_dim] for mode 'qnorm_rope'")
        if x.shape[-1] == _LANE:
            raise ValueError(f"tokamax {op}: mode 'qnorm_rope' needs head_dim above {_LANE} (upstream's kernel "
                             f"cannot lower a head without NoPE channels), got shape {tuple(x.shape)}")
    if mode != "rope_quant":
        return deepseek_rope_op(x.contiguous(), positions.contiguous(), cos_sin_cache.contiguous(), mode, inverse,
                                float(eps))
    dtype = _quant_dtype(op, quant_dtype)
    if x.shape[-1] != _LANE:
        raise ValueError(f"tokamax {op}: mode 'rope_quant' needs head_dim {_LANE}, got shape {tuple(x.shape)}")
    if x.dim() == 2 and x.shape[0] % _LANE != 0:
        raise ValueError(f"tokamax {op}: mode 'rope_quant' with a 2-D x needs a multiple of {_LANE} tokens "
                         f"(upstream's kernel blocks the per-token scales by 128), got shape {tuple(x.shape)}")
    return deepseek_rope_quant_op(x.contiguous(), positions.contiguous(), cos_sin_cache.contiguous(), inverse,
                                  str(dtype).removeprefix("torch."))
