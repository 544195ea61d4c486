"""Fused mixture-of-experts layer on Torch tensors through upstream's public experimental fused MoE
(`_src.ops.experimental.fused_moe.api.fused_moe`, `ops.experimental.tpu.FusedMoe`, the Mosaic kernel):
softmax router over the gating logits, top-k experts per token (optionally renormalised), each expert's
gated MLP (`act(x @ w1[:, :inter]) * (x @ w1[:, inter:])`, then `@ w2`), summed with the router weights.
bf16, fp8 e4m3 or int8 expert weights (the quantized ones with per-channel scales). Forward only, as
upstream's Torch op.

Runs on CPU tensors in Pallas TPU interpret mode; on one device (expert parallelism over a one-device
mesh, as upstream's Torch op).
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import numpy as np
import torch

from . import _checks
from ._bridge import chip_for_tracing, register

__all__ = ["fused_moe", "fused_moe_op"]

ACT_FNS = ("silu", "swigluoai", "silu_and_mul_with_clamp")  # upstream's kernel's ACT_FNS
_SCALED = (torch.float8_e4m3fn, torch.int8)  # weight dtypes with per-channel scales
_WEIGHTS = (torch.bfloat16, *_SCALED)
_AXIS = "ep"


def _api() -> Any:
    """`ops._fused_moe`: upstream's fused MoE with its refusals named and its build memo kept per chip."""
    return importlib.import_module("..ops._fused_moe", __package__)


# ---- The JAX side (annotated: jax_op derives the Torch schema from them) ----------------------
@chip_for_tracing()
def _fused_moe_jax(x: jax.Array, w1: jax.Array, w2: jax.Array, gating: jax.Array, w1_scale: jax.Array | None,
                   w2_scale: jax.Array | None, w1_bias: jax.Array | None, w2_bias: jax.Array | None, topk: int,
                   renormalize: bool, act_fn: str) -> jax.Array:
    # Upstream's Op takes a concrete mesh (as its Torch op builds one): one device, one expert shard;
    # traced under that mesh's abstract form, which shard_map wants as the context mesh.
    mesh = jax.sharding.Mesh(np.asarray([_one_device()]), (_AXIS,))
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return _api().fused_moe(x, w1, w2, gating, w1_scale, w2_scale, w1_bias, w2_bias, topk=topk,
                                renormalize=renormalize, act_fn=act_fn, mesh=mesh, implementation="mosaic_tpu")


def _one_device() -> Any:
    """The device of the layer's one-shard mesh: the context mesh's first where one is set (a program
    compiled ahead of time for a TPU topology under `jax.set_mesh`, whose devices are not JAX's
    backend's), else JAX's first device (torch-tpu's export, CPU tensors)."""
    from jax._src import mesh as mesh_lib  # no public accessor of the concrete context mesh inside jit

    context = mesh_lib.get_concrete_mesh()
    return context.devices.flat[0] if context is not None and not context.empty else jax.devices()[0]


fused_moe_op = register("fused_moe", _fused_moe_jax)


# ---- Fake kernel that takes symbolic sizes ------------------------------------------------------
@fused_moe_op.register_fake
def _fused_moe_fake(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gating: torch.Tensor,
                    w1_scale: torch.Tensor | None, w2_scale: torch.Tensor | None, w1_bias: torch.Tensor | None,
                    w2_bias: torch.Tensor | None, topk: int, renormalize: bool, act_fn: str) -> torch.Tensor:
    return torch.empty_like(x)


# ---- What users call ---------------------------------------------------------------------------
def _check(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gating: torch.Tensor, w1_scale: torch.Tensor | None,
           w2_scale: torch.Tensor | None, w1_bias: torch.Tensor | None, w2_bias: torch.Tensor | None, topk: int,
           renormalize: bool, act_fn: str) -> None:
    op = "fused_moe"
    _checks.tensors(op, x=x, w1=w1, w2=w2, gating=gating, w1_scale=w1_scale, w2_scale=w2_scale, w1_bias=w1_bias,
                    w2_bias=w2_bias, optional=("w1_scale", "w2_scale", "w1_bias", "w2_bias"))
    _checks.floats(op, x=x)
    _checks.rank(op, "x", x, (2,), "[tokens, hidden]")
    _checks.rank(op, "w1", w1, (3,), "[experts, hidden, 2 * inter]")
    _checks.rank(op, "w2", w2, (3,), "[experts, inter, hidden]")
    _checks.dtype(op, "w1", w1, _WEIGHTS)
    if w2.dtype != w1.dtype:
        raise TypeError(f"tokamax {op}: w1 and w2 must share a dtype, got {w1.dtype}, {w2.dtype}")
    experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[1]
    if w1.shape[2] % 2:
        raise ValueError(f"tokamax {op}: w1 must be [experts, hidden, 2 * inter] (gate and up halves), "
                         f"got shape {tuple(w1.shape)}")
    _checks.same(op, "the hidden sizes", x=hidden, w1=w1.shape[1], w2=w2.shape[2])
    _checks.same(op, "the expert counts", w1=experts, w2=w2.shape[0], gating=gating.shape[-1])
    _checks.same(op, "the intermediate sizes", w1_half=w1.shape[2] // 2, w2=inter)
    _checks.dtype(op, "gating", gating, (torch.float32, torch.bfloat16))
    _checks.shape(op, "gating", gating, (x.shape[0], experts), "[tokens, experts]")
    if w1.dtype in _SCALED:
        if w1_scale is None or w2_scale is None:
            raise ValueError(f"tokamax {op}: {w1.dtype} weights need w1_scale and w2_scale (per output channel)")
        _checks.dtype(op, "w1_scale", w1_scale, (torch.float32,))
        _checks.dtype(op, "w2_scale", w2_scale, (torch.float32,))
        _checks.shape(op, "w1_scale", w1_scale, (experts, w1.shape[2]), "[experts, 2 * inter]")
        _checks.shape(op, "w2_scale", w2_scale, (experts, hidden), "[experts, hidden]")
    elif w1_scale is not None or w2_scale is not None:
        raise ValueError(f"tokamax {op}: bfloat16 weights take no w1_scale or w2_scale")
    if w1_bias is not None:
        _checks.floats(op, w1_bias=w1_bias)
        _checks.shape(op, "w1_bias", w1_bias, (experts, 1, w1.shape[2]), "[experts, 1, 2 * inter]")
    if w2_bias is not None:
        _checks.floats(op, w2_bias=w2_bias)
        _checks.shape(op, "w2_bias", w2_bias, (experts, 1, hidden), "[experts, 1, hidden]")
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= experts:
        raise ValueError(f"tokamax {op}: topk must be an int in [1, experts={experts}], got {topk!r}")
    if not isinstance(renormalize, bool):
        raise TypeError(f"tokamax {op}: renormalize must be a bool, got {type(renormalize).__name__}")
    _checks.choice(op, "act_fn", act_fn, ACT_FNS)


def fused_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gating: torch.Tensor,
              w1_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
              w1_bias: torch.Tensor | None = None, w2_bias: torch.Tensor | None = None, *, topk: int = 2,
              renormalize: bool = True, act_fn: str = "silu") -> torch.Tensor:
    """Upstream's fused MoE layer (forward): x [tokens, hidden] -> [tokens, hidden], in x's dtype.

    x bf16 or f32 (the kernel routes bf16 rows); w1 [experts, hidden, 2 * inter] (gate then up
    halves), w2 [experts, inter, hidden], both bf16, fp8 e4m3 or int8; gating [tokens, experts]
    float32 or bf16 router logits. fp8 and int8 weights take float32 per-output-channel scales
    w1_scale [experts, 2 * inter] and w2_scale [experts, hidden]; bf16 weights none. Optional biases
    w1_bias [experts, 1, 2 * inter] (added before the activation) and w2_bias [experts, 1, hidden].
    Routing: softmax of the logits, the `topk` largest per token, renormalised to sum to 1 with
    `renormalize`. `act_fn`: "silu", "swigluoai" (GPT-OSS) or "silu_and_mul_with_clamp"
    (DeepSeek-V4). Sizes: what upstream's kernel takes (it says so otherwise, e.g. int8 weights
    want hidden and inter multiples of 512).
    """
    _check(x, w1, w2, gating, w1_scale, w2_scale, w1_bias, w2_bias, topk, renormalize, act_fn)

    def c(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.contiguous()

    return fused_moe_op(x.contiguous(), w1.contiguous(), w2.contiguous(), gating.contiguous(), c(w1_scale),
                        c(w2_scale), c(w1_bias), c(w2_bias), topk, renormalize, act_fn)
