"""Torch ops over the JAX kernels, made with torch-tpu's `jax_op`.

Each op is a `torch.library.custom_op` in this build's own namespace (`add_op_namespace_prefix`),
so two versions of the kernel never share op names:

- TPU tensors: `jax_op` runs the JAX kernel on the TPU.
- CPU tensors: a CPU kernel registered on the same op hands the tensors to JAX through DLPack
  (no copy), runs the kernel in Pallas TPU interpret mode for the chip `emulation.cpu_chip()`
  names, and hands the result back the same way. For checking numerics; slow.
- meta / fake tensors: output shapes and dtypes come from `jax_op`'s fake kernel.

`gmm`, `tgmm` and `splash_attention` run upstream's public ops (`tokamax.ops.ragged_dot_general`,
`tokamax.ops.experimental.splash_attention`): upstream's config choice per chip and shape, the
Mosaic kernel where it takes the call and upstream's XLA fallback where it refuses (so any shape
the public op accepts works), and Torch autograd through upstream's VJPs (`jax.vjp` of the public
call). On CPU tensors upstream's `cross_compile` option lets the Mosaic path run in interpret mode.
The Python functions below check their arguments first, so a bad call fails with a message that
names the argument instead of a JAX traceback from inside the kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import torch
from torch.tpu.pallas import jax_op  # torch-tpu; `import torch` loads it

from . import emulation, ops
from ._ops import add_op_namespace_prefix
from ._ported import gmm_v2 as _gmm_v2
from ._ported import splash_attention as _splash

__all__ = ["gmm", "gmm_v2", "splash_attention", "tgmm", "tgmm_v2", "to_jax", "to_torch"]

FLOATS = (torch.bfloat16, torch.float32)

# Where the Mosaic kernel refuses a ragged dot, upstream falls back to XLA's; torch-tpu's compiler
# does not take XLA's ragged-dot instruction, so (as upstream's Torch ops do) JAX expands it instead.
jax.config.update("jax_ragged_dot_use_ragged_dot_instruction", False)
DEVICES = ("tpu", "cpu", "meta")


# ---- Zero-copy conversion -------------------------------------------------------------------
def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A CPU tensor as a JAX array over the same memory (DLPack; contiguous tensors are not copied)."""
    return jax.dlpack.from_dlpack(tensor.detach().contiguous())


def to_torch(array: jax.Array) -> torch.Tensor:
    """A JAX CPU array as a tensor over the same memory (DLPack)."""
    return torch.from_dlpack(array)


def _cpu_kernel(jax_fn: Callable[..., Any]) -> Callable[..., Any]:
    """The CPU implementation of an op: DLPack in, the kernel in interpret mode, DLPack out."""
    jitted: dict[tuple, Callable[..., Any]] = {}

    def kernel(*args: Any) -> Any:
        statics = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        if statics not in jitted:
            jitted[statics] = jax.jit(jax_fn, static_argnums=tuple(i for i, _ in statics))
        arrays = [to_jax(a) if isinstance(a, torch.Tensor) else a for a in args]
        with emulation.interpret_on_cpu(emulation.cpu_chip()), ops.config.cross_compile(True):
            out = jitted[statics](*arrays)
        return jax.tree.map(to_torch, out)

    return kernel


def _register(name: str, jax_fn: Callable[..., Any], *, cpu: bool = True) -> Any:
    """The custom op `name` in this build's namespace, with a CPU kernel unless `cpu` is False."""
    op = jax_op(add_op_namespace_prefix(name), jax_fn)
    if cpu:
        op.register_kernel("cpu", _cpu_kernel(jax_fn))
    else:
        def no_cpu(*args: Any) -> Any:
            raise NotImplementedError(f"tokamax {name} runs on TPU only: JAX's Pallas interpreter cannot run it "
                                      "on CPU (SMEM operands, dynamic DMA sizes); lower it for TPU instead")
        op.register_kernel("cpu", no_cpu)
    return op


def _chip_for_tracing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Lets tiling code ask for chip info while tracing on a host without a TPU (fake tensors, CPU).

    On a TPU host the real chip answers; the emulated one only stands in for CPU devices.
    """
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with emulation.emulated_chip(emulation.cpu_chip()):
            return fn(*args, **kwargs)
    return wrapped


# ---- The JAX side of each op (annotated: jax_op derives the Torch schema from them) ---------
_GMM = jax.lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])  # lhs [m, k] x rhs [g, k, n]
_GMM_T = jax.lax.RaggedDotDimensionNumbers((([1], [2]), ([], [])), [0], [0])  # rhs [g, n, k]
_TGMM = jax.lax.RaggedDotDimensionNumbers((([0], [0]), ([], [])), [0], [])  # lhs [m, k] x grad [m, n]


def _gmm_public(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool) -> jax.Array:
    # lhs and rhs share a dtype (checked), so the output has it without naming it: as a JAX user's call
    # (and upstream's Torch op) does, which is what upstream's tables are keyed on.
    return ops.ragged_dot_general(lhs, rhs, group_sizes, _GMM_T if transpose_rhs else _GMM)


@_chip_for_tracing
def _gmm_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool) -> jax.Array:
    return _gmm_public(lhs, rhs, group_sizes, transpose_rhs)


@_chip_for_tracing
def _gmm_bwd_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, grad: jax.Array, transpose_rhs: bool
                 ) -> tuple[jax.Array, jax.Array]:
    _, vjp = jax.vjp(lambda a, b: _gmm_public(a, b, group_sizes, transpose_rhs), lhs, rhs)
    return vjp(grad)


@_chip_for_tracing
def _tgmm_jax(lhs: jax.Array, grad: jax.Array, group_sizes: jax.Array) -> jax.Array:
    return ops.ragged_dot_general(lhs, grad, group_sizes, _TGMM)


@_chip_for_tracing
def _gmm_v2_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array, transpose_rhs: bool) -> jax.Array:
    return _gmm_v2.gmm_v2(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype, transpose_rhs=transpose_rhs)


@_chip_for_tracing
def _tgmm_v2_jax(lhs: jax.Array, rhs: jax.Array, group_sizes: jax.Array) -> jax.Array:
    return _gmm_v2.tgmm_v2(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype)


def _splash_public(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, window_left: int,
                   window_right: int) -> jax.Array:
    """Upstream's public splash call for one mask: causal, local (window sizes >= 0), or full."""
    shape = (q.shape[1], k.shape[-2])
    if window_left >= 0 or window_right >= 0:
        mask = _splash.LocalMask(shape, window_size=(window_left if window_left >= 0 else None,
                                                     window_right if window_right >= 0 else None), offset=0)
    elif causal:
        mask = _splash.CausalMask(shape)
    else:
        mask = None
    return ops.experimental.splash_attention(q, k, v, mask, is_mqa=k.ndim == 2)


@_chip_for_tracing
def _splash_jax(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool, window_left: int,
                window_right: int) -> jax.Array:
    return _splash_public(q, k, v, causal, window_left, window_right)


@_chip_for_tracing
def _splash_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, grad: jax.Array, causal: bool, window_left: int,
                    window_right: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    _, vjp = jax.vjp(lambda q, k, v: _splash_public(q, k, v, causal, window_left, window_right), q, k, v)
    return vjp(grad.astype(q.dtype))


def _splash_segments_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array, kv_segments: jax.Array,
                         sinks: jax.Array, causal: bool, window_left: int, window_right: int, soft_cap: float,
                         use_sinks: bool) -> jax.Array:
    """Upstream's public splash call with segment ids (padding, packed documents), a soft cap and sinks."""
    shape = (q.shape[1], k.shape[-2])
    if window_left >= 0 or window_right >= 0:
        mask = _splash.LocalMask(shape, window_size=(window_left if window_left >= 0 else None,
                                                     window_right if window_right >= 0 else None), offset=0)
    else:
        mask = _splash.CausalMask(shape) if causal else None
    segments = _splash_base().SegmentIds(q_segments, kv_segments)
    return ops.experimental.splash_attention(q, k, v, mask, segments, sinks if use_sinks else None,
                                             attn_logits_soft_cap=soft_cap if soft_cap > 0 else None)


def _splash_base():  # noqa: ANN202 - upstream's splash Op base (its SegmentIds)
    import importlib

    return importlib.import_module("._ported._src.ops.experimental.tpu.splash_attention.base", __package__)


@_chip_for_tracing
def _splash_segments_fwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array,
                             kv_segments: jax.Array, sinks: jax.Array, causal: bool, window_left: int,
                             window_right: int, soft_cap: float, use_sinks: bool) -> jax.Array:
    return _splash_segments_jax(q, k, v, q_segments, kv_segments, sinks, causal, window_left, window_right,
                                soft_cap, use_sinks)


@_chip_for_tracing
def _splash_segments_bwd_jax(q: jax.Array, k: jax.Array, v: jax.Array, q_segments: jax.Array,
                             kv_segments: jax.Array, sinks: jax.Array, grad: jax.Array, causal: bool,
                             window_left: int, window_right: int, soft_cap: float, use_sinks: bool
                             ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, sinks: jax.Array) -> jax.Array:
        return _splash_segments_jax(q, k, v, q_segments, kv_segments, sinks, causal, window_left, window_right,
                                    soft_cap, use_sinks)

    _, vjp = jax.vjp(fn, q, k, v, sinks)
    return vjp(grad.astype(q.dtype))


gmm_op = _register("gmm", _gmm_jax)
gmm_bwd_op = _register("gmm_bwd", _gmm_bwd_jax)
tgmm_op = _register("tgmm", _tgmm_jax)
gmm_v2_op = _register("gmm_v2", _gmm_v2_jax, cpu=False)
tgmm_v2_op = _register("tgmm_v2", _tgmm_v2_jax, cpu=False)
splash_op = _register("splash_attention", _splash_jax)
splash_bwd_op = _register("splash_attention_bwd", _splash_bwd_jax)
splash_segments_op = _register("splash_attention_segments", _splash_segments_fwd_jax)
splash_segments_bwd_op = _register("splash_attention_segments_bwd", _splash_segments_bwd_jax)


# ---- Fake kernels that take symbolic sizes (torch.compile(dynamic=True)) -------------------------
# jax_op's default fake kernel evaluates the JAX function's shapes and refuses symbolic sizes; these
# give each op's output shapes from its inputs' alone, so compiled models trace through the ops.
@gmm_op.register_fake
def _gmm_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, transpose_rhs: bool) -> torch.Tensor:
    return lhs.new_empty((lhs.shape[0], rhs.shape[1] if transpose_rhs else rhs.shape[2]))


@gmm_bwd_op.register_fake
def _gmm_bwd_fake(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, grad: torch.Tensor,
                  transpose_rhs: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(lhs), torch.empty_like(rhs)


@tgmm_op.register_fake
def _tgmm_fake(lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    return lhs.new_empty((group_sizes.shape[0], lhs.shape[1], grad.shape[1]))


@splash_op.register_fake
def _splash_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window_left: int,
                 window_right: int) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))


@splash_bwd_op.register_fake
def _splash_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, causal: bool,
                     window_left: int, window_right: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@splash_segments_op.register_fake
def _splash_segments_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segments: torch.Tensor,
                          kv_segments: torch.Tensor, sinks: torch.Tensor, causal: bool, window_left: int,
                          window_right: int, soft_cap: float, use_sinks: bool) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))


@splash_segments_bwd_op.register_fake
def _splash_segments_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segments: torch.Tensor,
                              kv_segments: torch.Tensor, sinks: torch.Tensor, grad: torch.Tensor, causal: bool,
                              window_left: int, window_right: int, soft_cap: float, use_sinks: bool) -> tuple:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(sinks)


# ---- Autograd: upstream's VJPs ------------------------------------------------------------------
def _gmm_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    lhs, rhs, group_sizes, transpose_rhs = inputs
    ctx.save_for_backward(lhs, rhs, group_sizes)
    ctx.transpose_rhs = transpose_rhs


def _gmm_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    lhs, rhs, group_sizes = ctx.saved_tensors
    dlhs, drhs = gmm_bwd_op(lhs, rhs, group_sizes, grad.contiguous(), ctx.transpose_rhs)
    return dlhs, drhs, None, None


def _splash_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    q, k, v, *statics = inputs
    ctx.save_for_backward(q, k, v)
    ctx.statics = statics


def _splash_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    q, k, v = ctx.saved_tensors
    dq, dk, dv = splash_bwd_op(q, k, v, grad.contiguous(), *ctx.statics)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def _splash_segments_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    q, k, v, q_segments, kv_segments, sinks, *statics = inputs
    ctx.save_for_backward(q, k, v, q_segments, kv_segments, sinks)
    ctx.statics = statics


def _splash_segments_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    q, k, v, q_segments, kv_segments, sinks = ctx.saved_tensors
    dq, dk, dv, dsinks = splash_segments_bwd_op(q, k, v, q_segments, kv_segments, sinks, grad.contiguous(),
                                                *ctx.statics)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, dsinks.to(sinks.dtype),
            None, None, None, None, None)


gmm_op.register_autograd(_gmm_backward, setup_context=_gmm_setup)
splash_segments_op.register_autograd(_splash_segments_backward, setup_context=_splash_segments_setup)
splash_op.register_autograd(_splash_backward, setup_context=_splash_setup)


# ---- What users call: argument checks, then the op --------------------------------------------
def _check_tensors(op: str, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tokamax {op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    devices = {t.device.type for t in tensors.values()}
    if not devices <= set(DEVICES):
        raise ValueError(f"tokamax {op}: tensors must be on a TPU (or CPU, interpret mode), got {sorted(devices)}")
    if len({t.device for t in tensors.values()}) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        raise ValueError(f"tokamax {op}: all tensors must be on one device, got {where}")


def _check_float(op: str, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.dtype not in FLOATS:
            raise TypeError(f"tokamax {op}: {name} must be bfloat16 or float32, got {t.dtype}")
    if len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(f"tokamax {op}: {' and '.join(tensors)} must share a dtype, got "
                        + ", ".join(str(t.dtype) for t in tensors.values()))


def _check_rank(op: str, name: str, t: torch.Tensor, ranks: tuple[int, ...], layout: str) -> None:
    if t.dim() not in ranks:
        raise ValueError(f"tokamax {op}: {name} must be {layout}, got shape {tuple(t.shape)}")


def _check_group_sizes(op: str, group_sizes: torch.Tensor, groups: int) -> None:
    if group_sizes.dtype != torch.int32:
        raise TypeError(f"tokamax {op}: group_sizes must be int32, got {group_sizes.dtype}")
    if group_sizes.dim() != 1 or group_sizes.shape[0] != groups:
        raise ValueError(f"tokamax {op}: group_sizes must have one entry per group ({groups}), "
                         f"got shape {tuple(group_sizes.shape)}")


def gmm(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, *, transpose_rhs: bool = False
        ) -> torch.Tensor:
    """Grouped matmul: rows of `lhs` in group g times `rhs[g]`; differentiable in lhs and rhs.

    lhs [m, k]; rhs [groups, k, n] ([groups, n, k] with `transpose_rhs`); group_sizes int32
    [groups], summing to at most m (rows past the sum give zeros). bf16 or f32; any sizes the
    public op takes (the Mosaic kernel where it takes them, else upstream's XLA fallback).
    """
    _check_tensors("gmm", lhs=lhs, rhs=rhs, group_sizes=group_sizes)
    _check_float("gmm", lhs=lhs, rhs=rhs)
    _check_rank("gmm", "lhs", lhs, (2,), "[m, k]")
    _check_rank("gmm", "rhs", rhs, (3,), "[groups, n, k]" if transpose_rhs else "[groups, k, n]")
    k = rhs.shape[2] if transpose_rhs else rhs.shape[1]
    if lhs.shape[1] != k:
        raise ValueError(f"tokamax gmm: lhs has k={lhs.shape[1]} columns but rhs has k={k} "
                         f"(shapes {tuple(lhs.shape)} and {tuple(rhs.shape)}, transpose_rhs={transpose_rhs})")
    _check_group_sizes("gmm", group_sizes, rhs.shape[0])
    return gmm_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous(), transpose_rhs)


def tgmm(lhs: torch.Tensor, grad: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Per-group `lhs[rows of g].T @ grad[rows of g]`: lhs [m, k], grad [m, n] -> [groups, k, n]."""
    _check_tensors("tgmm", lhs=lhs, grad=grad, group_sizes=group_sizes)
    _check_float("tgmm", lhs=lhs, grad=grad)
    _check_rank("tgmm", "lhs", lhs, (2,), "[m, k]")
    _check_rank("tgmm", "grad", grad, (2,), "[m, n]")
    if lhs.shape[0] != grad.shape[0]:
        raise ValueError(f"tokamax tgmm: lhs has m={lhs.shape[0]} rows, grad has {grad.shape[0]}")
    if group_sizes.dim() != 1:
        raise ValueError(f"tokamax tgmm: group_sizes must be 1-D, got shape {tuple(group_sizes.shape)}")
    _check_group_sizes("tgmm", group_sizes, group_sizes.shape[0])
    return tgmm_op(lhs.contiguous(), grad.contiguous(), group_sizes.contiguous())


def _check_jax_for_v2(op: str) -> None:
    from jax.experimental.pallas import tpu as pltpu

    if not hasattr(pltpu, "TensorCoreMesh"):
        raise RuntimeError(f"tokamax {op} needs jax >= 0.11.1 (pltpu.TensorCoreMesh), this is jax {jax.__version__}")


def gmm_v2(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor, *, transpose_rhs: bool = False
           ) -> torch.Tensor:
    """Grouped matmul with the v2 kernel (TPU only: JAX's interpreter cannot run it on CPU; jax >= 0.11.1)."""
    _check_jax_for_v2("gmm_v2")
    _check_tensors("gmm_v2", lhs=lhs, rhs=rhs, group_sizes=group_sizes)
    _check_float("gmm_v2", lhs=lhs, rhs=rhs)
    _check_rank("gmm_v2", "lhs", lhs, (2,), "[m, k]")
    _check_rank("gmm_v2", "rhs", rhs, (3,), "[groups, n, k]" if transpose_rhs else "[groups, k, n]")
    _check_group_sizes("gmm_v2", group_sizes, rhs.shape[0])
    return gmm_v2_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous(), transpose_rhs)


def tgmm_v2(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """Per-group `lhs_g^T @ rhs_g` with the v2 kernel (TPU only; jax >= 0.11.1): lhs [m, k], rhs [m, n]."""
    _check_jax_for_v2("tgmm_v2")
    _check_tensors("tgmm_v2", lhs=lhs, rhs=rhs, group_sizes=group_sizes)
    _check_float("tgmm_v2", lhs=lhs, rhs=rhs)
    _check_rank("tgmm_v2", "lhs", lhs, (2,), "[m, k]")
    _check_rank("tgmm_v2", "rhs", rhs, (2,), "[m, n]")
    _check_group_sizes("tgmm_v2", group_sizes, group_sizes.shape[0] if group_sizes.dim() == 1 else -1)
    return tgmm_v2_op(lhs.contiguous(), rhs.contiguous(), group_sizes.contiguous())


def splash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                     window: tuple[int | None, int | None] | None = None, segment_ids: torch.Tensor | None = None,
                     soft_cap: float | None = None, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Splash attention (upstream's public op), differentiable in q, k and v: softmax(q k^T, masked) v,
    no scaling.

    q [heads, q_len, head_dim]; k, v [heads, kv_len, head_dim], or [kv_len, head_dim] for
    multi-query attention; k, v may have fewer heads than q (grouped-query attention). Mask:
    causal (default), full (`causal=False`), or a local window `(left, right)` of tokens each
    side (None: unbounded). Lengths: what the public op takes (multiples of its 128 blocks; it says
    so otherwise). `segment_ids` (int32 [len], q and k alike) keeps attention within equal ids
    (padding, packed documents); `soft_cap` caps logits as `cap * tanh(x / cap)`; `sinks` (float
    [heads], differentiable) adds a per-head sink logit to each softmax denominator.
    """
    _check_tensors("splash_attention", q=q, k=k, v=v)
    _check_float("splash_attention", q=q, k=k, v=v)
    _check_rank("splash_attention", "q", q, (3,), "[heads, q_len, head_dim]")
    _check_rank("splash_attention", "k", k, (2, 3), "[heads, kv_len, head_dim] or [kv_len, head_dim]")
    if v.shape != k.shape:
        raise ValueError(f"tokamax splash_attention: v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.dim() == 3 and q.shape[0] % k.shape[0]:
        raise ValueError(f"tokamax splash_attention: q's {q.shape[0]} heads must be a multiple of k's {k.shape[0]}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"tokamax splash_attention: head_dim differs: q {q.shape[-1]}, k {k.shape[-1]}")
    left, right = window if window is not None else (None, None)
    if window is not None and (left is None and right is None):
        raise ValueError("tokamax splash_attention: a window needs a left or a right size")
    if segment_ids is not None or soft_cap is not None or sinks is not None:
        return _splash_with_segments(q, k, v, causal, left, right, segment_ids, soft_cap, sinks)
    return splash_op(q.contiguous(), k.contiguous(), v.contiguous(), causal,
                     -1 if left is None else int(left), -1 if right is None else int(right))


def _splash_with_segments(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, left: int | None,
                          right: int | None, segment_ids: torch.Tensor | None, soft_cap: float | None,
                          sinks: torch.Tensor | None) -> torch.Tensor:
    op = "splash_attention"
    if k.dim() != 3:
        raise ValueError(f"tokamax {op}: segment ids, soft cap and sinks take k, v as [heads, kv_len, head_dim]")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"tokamax {op}: segment ids need q_len == kv_len, got {q.shape[1]} and {k.shape[1]}")
    if segment_ids is None:
        segment_ids = torch.zeros(q.shape[1], dtype=torch.int32, device=q.device)
    _check_tensors(op, q=q, segment_ids=segment_ids)
    if segment_ids.dtype != torch.int32 or segment_ids.shape != (q.shape[1],):
        raise ValueError(f"tokamax {op}: segment_ids must be int32 [{q.shape[1]}], got {segment_ids.dtype} "
                         f"{tuple(segment_ids.shape)}")
    if sinks is not None and sinks.shape != (q.shape[0],):
        raise ValueError(f"tokamax {op}: sinks must be [heads] = [{q.shape[0]}], got {tuple(sinks.shape)}")
    if soft_cap is not None and not soft_cap > 0:
        raise ValueError(f"tokamax {op}: soft_cap must be positive, got {soft_cap}")
    use_sinks = sinks is not None
    sinks = sinks.to(torch.float32) if use_sinks else torch.zeros(q.shape[0], dtype=torch.float32, device=q.device)
    return splash_segments_op(q.contiguous(), k.contiguous(), v.contiguous(), segment_ids.contiguous(),
                              segment_ids.contiguous(), sinks.contiguous(), causal,
                              -1 if left is None else int(left), -1 if right is None else int(right),
                              float(soft_cap) if soft_cap is not None else -1.0, use_sinks)
