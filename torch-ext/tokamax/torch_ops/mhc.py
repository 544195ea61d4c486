"""DeepSeek-V4 manifold-constrained hyper-connections (mHC) on Torch tensors, through upstream's public
`mhc_pre`, `mhc_post` and `mhc_fused_post_pre`, in upstream's flat layout: M residual streams of
width H per token as `residual` [tokens, M * H] bf16, stream i in columns [i * H, (i + 1) * H).
Forward only (upstream registers no backward). Upstream runs the kernels on TPU v5e and newer; on CPU
tensors they run in Pallas TPU interpret mode (as `emulation.cpu_chip()`).

Per sublayer: `post_mix, comb_mix, layer_input = mhc_pre(residual, fn, ...)`, the sublayer on
`layer_input`, then `residual = mhc_post(x, residual, post_mix, comb_mix)`; `mhc_fused_post_pre`
is one sublayer's post followed by the next one's pre.
"""

from __future__ import annotations

import jax
import torch

from .. import ops
from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["mhc_fused_post_pre", "mhc_fused_post_pre_op", "mhc_post", "mhc_post_op", "mhc_pre", "mhc_pre_op"]


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _pre_jax(residual: jax.Array, fn: jax.Array, hc_scale: jax.Array, hc_base: jax.Array, rms_eps: float,
             hc_pre_eps: float, hc_sinkhorn_eps: float, hc_post_mult_value: float, sinkhorn_repeat: int
             ) -> tuple[jax.Array, jax.Array, jax.Array]:
    post_mix, comb_mix, layer_input = ops.mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                                                  hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat,
                                                  implementation="mosaic_tpu")
    return post_mix, comb_mix, layer_input


@chip_for_tracing()
def _post_jax(x: jax.Array, residual: jax.Array, post_layer_mix: jax.Array, comb_res_mix: jax.Array) -> jax.Array:
    return ops.mhc_post(x, residual, post_layer_mix, comb_res_mix, implementation="mosaic_tpu")


@chip_for_tracing()
def _fused_jax(x: jax.Array, residual: jax.Array, post_layer_mix: jax.Array, comb_res_mix: jax.Array,
               fn: jax.Array, hc_scale: jax.Array, hc_base: jax.Array, rms_eps: float, hc_pre_eps: float,
               hc_sinkhorn_eps: float, hc_post_mult_value: float, sinkhorn_repeat: int
               ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    new_residual, post_mix, comb_mix, layer_input = ops.mhc_fused_post_pre(
        x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
        hc_post_mult_value, sinkhorn_repeat, implementation="mosaic_tpu")
    return new_residual, post_mix, comb_mix, layer_input


mhc_pre_op = register("mhc_pre", _pre_jax)
mhc_post_op = register("mhc_post", _post_jax)
mhc_fused_post_pre_op = register("mhc_fused_post_pre", _fused_jax)


def _streams(mix_dim: int) -> int:
    """M from the mix dimension M * (M + 2) (fn's rows), or 0 if it is not of that form.

    Found by comparison, as the row count may be symbolic: that specialises it (a weight size), not
    the token count.
    """
    m = 1
    while m * (m + 2) < mix_dim:
        m += 1
    return m if m * (m + 2) == mix_dim else 0


# ---- Fake kernels that take symbolic sizes ------------------------------------------------------
@mhc_pre_op.register_fake
def _pre_fake(residual: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
              rms_eps: float, hc_pre_eps: float, hc_sinkhorn_eps: float, hc_post_mult_value: float,
              sinkhorn_repeat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens, m = residual.shape[0], _streams(fn.shape[0])
    if m == 0:
        raise ValueError(f"tokamax mhc_pre: fn must have M * (M + 2) rows, got shape {tuple(fn.shape)}")
    return (residual.new_empty((tokens, m), dtype=torch.float32),
            residual.new_empty((tokens, m, m), dtype=torch.float32),
            residual.new_empty((tokens, residual.shape[1] // m), dtype=torch.bfloat16))


@mhc_post_op.register_fake
def _post_fake(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor
               ) -> torch.Tensor:
    return torch.empty_like(residual)


@mhc_fused_post_pre_op.register_fake
def _fused_fake(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor,
                fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor, rms_eps: float, hc_pre_eps: float,
                hc_sinkhorn_eps: float, hc_post_mult_value: float, sinkhorn_repeat: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.empty_like(residual), torch.empty_like(post_layer_mix, dtype=torch.float32),
            torch.empty_like(comb_res_mix, dtype=torch.float32), torch.empty_like(x, dtype=torch.bfloat16))


# ---- What users call ---------------------------------------------------------------------------

def _check_gates(op: str, residual: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
                 eps: dict[str, float], sinkhorn_repeat: int) -> int:
    """The mhc_pre arguments (shared with the fused op); returns M."""
    _checks.dtype(op, "residual", residual, (torch.bfloat16,))
    _checks.rank(op, "residual", residual, (2,), "[tokens, M * H]")
    for name, t in (("fn", fn), ("hc_scale", hc_scale), ("hc_base", hc_base)):
        _checks.dtype(op, name, t, (torch.float32,))
    _checks.rank(op, "fn", fn, (2,), "[M * (M + 2), M * H]")
    m = _streams(fn.shape[0])
    if m == 0:
        raise ValueError(f"tokamax {op}: fn must have M * (M + 2) rows for some M >= 1 (3, 8, 15, 24, ...), got "
                         f"shape {tuple(fn.shape)}")
    if residual.shape[1] % m != 0:
        raise ValueError(f"tokamax {op}: residual's width must be M * H with M={m} streams (from fn's "
                         f"{fn.shape[0]} rows), got shape {tuple(residual.shape)}")
    _checks.shape(op, "fn", fn, (m * (m + 2), residual.shape[1]), "[M * (M + 2), M * H]")
    _checks.shape(op, "hc_scale", hc_scale, (3,), "[3]")
    _checks.shape(op, "hc_base", hc_base, (m * (m + 2),), "[M * (M + 2)]")
    for name, value in eps.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"tokamax {op}: {name} must be a float, got {value!r}")
    if isinstance(sinkhorn_repeat, bool) or not isinstance(sinkhorn_repeat, int) or sinkhorn_repeat < 1:
        raise ValueError(f"tokamax {op}: sinkhorn_repeat must be an int >= 1, got {sinkhorn_repeat!r}")
    return m


def _check_post(op: str, x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                comb_res_mix: torch.Tensor) -> int:
    """The mhc_post arguments (shared with the fused op); returns M."""
    _checks.dtype(op, "x", x, (torch.bfloat16,))
    _checks.dtype(op, "residual", residual, (torch.bfloat16,))
    _checks.dtype(op, "post_layer_mix", post_layer_mix, (torch.float32,))
    _checks.dtype(op, "comb_res_mix", comb_res_mix, (torch.float32,))
    _checks.rank(op, "x", x, (2,), "[tokens, H]")
    _checks.rank(op, "comb_res_mix", comb_res_mix, (3,), "[tokens, M, M]")
    tokens, hidden, m = x.shape[0], x.shape[1], comb_res_mix.shape[2]
    _checks.shape(op, "residual", residual, (tokens, m * hidden), "[tokens, M * H]")
    _checks.shape(op, "post_layer_mix", post_layer_mix, (tokens, m), "[tokens, M]")
    _checks.shape(op, "comb_res_mix", comb_res_mix, (tokens, m, m), "[tokens, M, M]")
    return m


def _floats(*values: float) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def mhc_pre(residual: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
            rms_eps: float, hc_pre_eps: float, hc_sinkhorn_eps: float, hc_post_mult_value: float,
            sinkhorn_repeat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC pre step, before each sublayer: per-token gates from the streams, and the sublayer input.

    residual bf16 [tokens, M * H]; fn float32 [M * (M + 2), M * H] (the gate projection; M comes
    from its rows); hc_scale float32 [3] (pre/post/comb logit scales); hc_base float32
    [M * (M + 2)] (logit biases, pre/post/comb order). The gates: RMS-normalised `residual @ fn.T`,
    scaled and biased; pre = sigmoid + hc_pre_eps; post = sigmoid * hc_post_mult_value; comb = a
    softmax, then `sinkhorn_repeat` (>= 1) Sinkhorn normalisations with hc_sinkhorn_eps.

    Returns `(post_mix float32 [tokens, M], comb_mix float32 [tokens, M, M], layer_input bf16
    [tokens, H])`, layer_input the pre-weighted sum of the streams.
    """
    op = "mhc_pre"
    _checks.tensors(op, residual=residual, fn=fn, hc_scale=hc_scale, hc_base=hc_base)
    eps = dict(rms_eps=rms_eps, hc_pre_eps=hc_pre_eps, hc_sinkhorn_eps=hc_sinkhorn_eps,
               hc_post_mult_value=hc_post_mult_value)
    _check_gates(op, residual, fn, hc_scale, hc_base, eps, sinkhorn_repeat)
    return mhc_pre_op(residual.contiguous(), fn.contiguous(), hc_scale.contiguous(), hc_base.contiguous(),
                      *_floats(*eps.values()), sinkhorn_repeat)


def mhc_post(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor
             ) -> torch.Tensor:
    """mHC post step, after each sublayer: the sublayer output written back into the streams,
    `new[j] = post_layer_mix[:, j] * x + sum_i comb_res_mix[:, i, j] * residual[i]`.

    x bf16 [tokens, H]; residual bf16 [tokens, M * H]; post_layer_mix float32 [tokens, M];
    comb_res_mix float32 [tokens, M, M]. Returns bf16 [tokens, M * H].
    """
    op = "mhc_post"
    _checks.tensors(op, x=x, residual=residual, post_layer_mix=post_layer_mix, comb_res_mix=comb_res_mix)
    _check_post(op, x, residual, post_layer_mix, comb_res_mix)
    return mhc_post_op(x.contiguous(), residual.contiguous(), post_layer_mix.contiguous(), comb_res_mix.contiguous())


def mhc_fused_post_pre(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                       comb_res_mix: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
                       rms_eps: float, hc_pre_eps: float, hc_sinkhorn_eps: float, hc_post_mult_value: float,
                       sinkhorn_repeat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`mhc_post` of one sublayer, then `mhc_pre` of the next on its result, in one pass over the streams.

    Arguments as `mhc_post` (x, residual, post_layer_mix, comb_res_mix) then `mhc_pre` (fn, hc_scale,
    hc_base and the gate scalars); both must give the same M. Returns `(new_residual bf16
    [tokens, M * H], post_mix float32 [tokens, M], comb_mix float32 [tokens, M, M], layer_input
    bf16 [tokens, H])`.
    """
    op = "mhc_fused_post_pre"
    _checks.tensors(op, x=x, residual=residual, post_layer_mix=post_layer_mix, comb_res_mix=comb_res_mix, fn=fn,
                    hc_scale=hc_scale, hc_base=hc_base)
    m_post = _check_post(op, x, residual, post_layer_mix, comb_res_mix)
    eps = dict(rms_eps=rms_eps, hc_pre_eps=hc_pre_eps, hc_sinkhorn_eps=hc_sinkhorn_eps,
               hc_post_mult_value=hc_post_mult_value)
    m_pre = _check_gates(op, residual, fn, hc_scale, hc_base, eps, sinkhorn_repeat)
    if m_pre != m_post:
        raise ValueError(f"tokamax {op}: comb_res_mix has M={m_post} streams but fn's {fn.shape[0]} rows give "
                         f"M={m_pre}")
    return mhc_fused_post_pre_op(x.contiguous(), residual.contiguous(), post_layer_mix.contiguous(),
                                 comb_res_mix.contiguous(), fn.contiguous(), hc_scale.contiguous(),
                                 hc_base.contiguous(), *_floats(*eps.values()), sinkhorn_repeat)
