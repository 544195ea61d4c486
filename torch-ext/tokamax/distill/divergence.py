"""The distillation divergence at any size, in JAX: argument checks, the kernels' blocks for the chip
being traced for, the backward's per-row vectors, and a call differentiable in the student.

`per_token(xs, ws, bs, xt, wt, bt, setting)` gives (divergence, entropy), float32 [rows] each, for
x_s [rows, hidden_s], w_s [vocab, hidden_s] (nn.Linear's layout) and the teacher's x_t [rows,
hidden_t], w_t [vocab, hidden_t]; biases float32 [vocab] or None. Three schemes (`SCHEMES`, the `scheme`
argument): "kernels", our Pallas kernels, neither operand padded or copied (`kernels`: the last blocks overhang
and are masked), no [rows, vocab] array anywhere; "stored", plain XLA in chunks of rows with the gradient's
[rows, vocab] basis Q kept from the forward (`stored`: four matmuls, as the loss written plainly); "recompute",
the stored scheme's forward without Q and a backward that makes Q again a chunk of vocabulary columns at a time
(`recompute`: six matmuls, no [rows, vocab] array kept); "auto" (the default), `stored.choose`'s rule on the chip
being traced for (`scheme_of`): the stored scheme where its temporaries fit an eighth of the chip's HBM, else the
recompute scheme where its roofline is under the kernels', else the kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.experimental.pallas import tpu as pltpu

from .. import checks, hosts, roofline
from ..lm_head.blocks import LANES
from ..lm_head.transform import LogitTransform
from . import fused, kernels, recompute, stored
from .blocks import Blocks, choose
from .kernels import Setting

DTYPES = ("bfloat16", "float32")
SCHEMES = ("auto", "kernels", "stored", "recompute")


class Forward(NamedTuple):
    """The forward kernel's outputs, float32 [rows] each (`kernels.OUTPUTS`)."""

    divergence: jax.Array
    entropy: jax.Array
    student_lse: jax.Array
    teacher_lse: jax.Array
    aux: jax.Array


def setting(beta: float, temperature: float = 1.0, student_scale: float = 1.0, student_soft_cap: float | None = None,
            teacher_scale: float = 1.0, teacher_soft_cap: float | None = None) -> Setting:
    """The kernels' static setting from TRL's arguments, refusing what TRL's function would not compute."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"tokamax distill: beta must be a number in [0, 1], got {beta!r}")
    if not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:  # NaN too; dynamo-traceable
        raise ValueError(f"tokamax distill: temperature must be > 0, got {temperature!r}")
    for name, value in (("student_scale", student_scale), ("teacher_scale", teacher_scale)):
        if not isinstance(value, (int, float)) or not -math.inf < value < math.inf:
            raise ValueError(f"tokamax distill: {name} must be a finite number, got {value!r}")
    for name, value in (("student_soft_cap", student_soft_cap), ("teacher_soft_cap", teacher_soft_cap)):
        if value is not None and (not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"tokamax distill: {name} must be > 0 or None, got {value!r}")

    def transform(scale: float, soft_cap: float | None) -> LogitTransform:
        return LogitTransform.of(scale=scale, soft_cap=soft_cap, temperature=temperature)

    return Setting(float(beta), transform(student_scale, student_soft_cap), transform(teacher_scale, teacher_soft_cap))


def _dtype(a: Any) -> str:
    """A JAX or Torch array's dtype by name ("bfloat16"): `check` serves the Torch op too."""
    return str(a.dtype).removeprefix("torch.")


def check(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array,
          bt: jax.Array | None) -> None:
    """Refuses operands the kernels cannot take, naming the argument."""
    for model, x, w, b in (("student", xs, ws, bs), ("teacher", xt, wt, bt)):
        for name, a in ((f"{model}_hidden", x), (f"{model}_weight", w)) + (((f"{model}_bias", b),) if b is not None
                                                                            else ()):
            checks.array("distill", name, a)
        if x.ndim != 2 or w.ndim != 2:
            raise ValueError(f"tokamax distill: the {model}'s hidden states must be [rows, hidden] and its weight "
                             f"[vocab, hidden], got {x.shape} and {w.shape}")
        if x.shape[1] != w.shape[1]:
            raise ValueError(f"tokamax distill: the {model}'s hidden size is {x.shape[1]} in its hidden states but "
                             f"{w.shape[1]} in its weight")
        if _dtype(x) != _dtype(w) or _dtype(x) not in DTYPES:
            raise TypeError(f"tokamax distill: the {model}'s hidden states and weight must share a dtype, bfloat16 "
                            f"or float32; got {_dtype(x)} and {_dtype(w)}")
        if b is not None and b.shape != (w.shape[0],):
            raise ValueError(f"tokamax distill: the {model}'s bias must be [vocab] ({w.shape[0]}), got {b.shape}")
    if ws.shape[0] != wt.shape[0]:
        raise ValueError(f"tokamax distill: the student's vocabulary ({ws.shape[0]}) and the teacher's "
                         f"({wt.shape[0]}) must be the same")
    if xs.shape[0] != xt.shape[0]:
        raise ValueError(f"tokamax distill: the student's rows ({xs.shape[0]}) and the teacher's ({xt.shape[0]}) "
                         f"must be the same tokens")


def check_vmem(xs: Any, xt: Any, vocab: int) -> None:
    """Refuses hidden sizes for which not even the smallest blocks fit the VMEM of the chip being traced for (the
    ValueError `blocks_for` raises when the kernels are traced), before anything is traced; JAX or Torch arrays
    (their hidden sizes and dtypes are read; rows do not matter)."""
    choose(dataclasses.replace(kernels.sizes_of(xs, xt, vocab), rows=LANES), pltpu.get_tpu_info().vmem_capacity_bytes)


def blocks_for(xs: jax.Array, xt: jax.Array, vocab: int, kernel: str) -> Blocks:
    """`kernel`'s blocks for these operands on the chip being traced for."""
    return choose(kernels.sizes_of(xs, xt, vocab), pltpu.get_tpu_info().vmem_capacity_bytes, kernel)


def _bias(b: jax.Array | None, vocab: int) -> jax.Array:
    return stored.bias(b, vocab)[None]  # the kernels take it as one [1, vocab] row


@hosts.emulated("distill.forward")
def forward(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
            setting: Setting) -> Forward:
    """The forward kernel's five per-row outputs."""
    check(xs, ws, bs, xt, wt, bt)
    vocab = ws.shape[0]
    out = kernels.forward(xs, ws, _bias(bs, vocab), xt, wt, _bias(bt, vocab), setting=setting,
                          blocks=blocks_for(xs, xt, vocab, "forward"))
    return Forward(*out)


@hosts.emulated("distill.backward")
def backward(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
             setting: Setting, saved: Forward, d_divergence: jax.Array, d_entropy: jax.Array | None = None,
             weight_grad: bool = True) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(dx_s, dw_s in their dtypes, db_s float32 [vocab]) from the forward's outputs and the cotangents of
    the divergence and (None: none) the entropy. `weight_grad` False: (dx_s, None, None), the weight's
    kernel not run (a frozen head: LoRA's)."""
    check(xs, ws, bs, xt, wt, bt)
    vocab = ws.shape[0]
    d_divergence = d_divergence.astype(jnp.float32)
    d_entropy = jnp.zeros_like(d_divergence) if d_entropy is None else d_entropy.astype(jnp.float32)
    vectors = (saved.student_lse, saved.teacher_lse, saved.aux, saved.entropy, d_divergence, d_entropy)
    operands = (xs, ws, _bias(bs, vocab), xt, wt, _bias(bt, vocab))
    dx = kernels.backward_x(vectors, *operands, setting=setting, blocks=blocks_for(xs, xt, vocab, "backward_x"))
    if not weight_grad:
        return dx, None, None
    dw, db = kernels.backward_w(vectors, *operands, setting=setting, blocks=blocks_for(xs, xt, vocab, "backward_w"))
    return dx, dw, db[0]


def _check_scheme(scheme: object) -> None:
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise ValueError(f"tokamax distill: scheme must be one of {', '.join(map(repr, SCHEMES))}, got {scheme!r}")


class Chosen(NamedTuple):
    """The scheme a call runs (`SCHEMES` but "auto") and its chunks: the stored scheme's rows per chunk, or the
    recompute scheme's forward rows per chunk (`chunk`) and backward columns per step (`vchunk`)."""

    scheme: str
    chunk: int | None = None
    vchunk: int | None = None


def scheme_of(scheme: str, xs: jax.Array, xt: jax.Array, vocab: int, setting: Setting | None = None) -> Chosen:
    """What `scheme` runs on the chip being traced for. "auto": the stored scheme where `stored.choose` takes it (Q
    within the share, faster than the kernels), else the recompute scheme where `recompute.choose` does (its
    roofline under the kernels': at Gemma 2 2B <- 9B's heads past the stored scheme's share it ran at 0.65x their
    time on the v5e), else the kernels."""
    _check_scheme(scheme)
    if scheme == "recompute" or scheme == "auto":
        sizes, on = kernels.sizes_of(xs, xt, vocab), roofline.chip()
        if scheme == "recompute":
            return Chosen("recompute", recompute.row_chunk(sizes, on), recompute.choose_chunk(sizes, on))
        chunk = stored.choose(sizes, on, setting)
        if chunk is not None:
            return Chosen("stored", chunk)
        chunks = recompute.choose(sizes, on, setting)
        return Chosen("kernels") if chunks is None else Chosen("recompute", *chunks)
    chunk = chunk_of(scheme, xs, xt, vocab, setting)
    return Chosen("kernels") if chunk is None else Chosen("stored", chunk)


def chunk_of(scheme: str, xs: jax.Array, xt: jax.Array, vocab: int, setting: Setting | None = None) -> int | None:
    """The stored scheme's chunk rows for `scheme` (`SCHEMES`), or None where it is not the stored scheme: "auto" by
    `stored.choose` on the chip being traced for (None: the recompute scheme or the kernels, `scheme_of` says
    which); "kernels" None; "stored" its chunk, or its smallest where it would not. Refuses
    "recompute", which is neither (`recompute.row_chunk` and `recompute.choose_chunk` give its chunks)."""
    _check_scheme(scheme)
    if scheme == "recompute":
        raise ValueError("tokamax distill: the recompute scheme has no stored chunk (recompute.row_chunk and "
                         "recompute.choose_chunk give its chunks)")
    if scheme == "kernels":
        return None
    chunk = stored.choose(kernels.sizes_of(xs, xt, vocab), roofline.chip(), setting)
    if scheme == "auto" or chunk is not None:
        return chunk
    return stored.chunk_for(xs.shape[0], stored.CHUNKS[-1])


@hosts.emulated("distill.per_token")
def per_token(xs: jax.Array, ws: jax.Array, bs: jax.Array | None, xt: jax.Array, wt: jax.Array, bt: jax.Array | None,
              setting: Setting, scheme: str = "auto") -> tuple[jax.Array, jax.Array]:
    """(divergence, the student's entropy), float32 [rows] each; differentiable in x_s, w_s and b_s (the
    teacher's operands get zero cotangents, which XLA drops where they are not used). `scheme`: `SCHEMES`
    (the module docstring)."""
    check(xs, ws, bs, xt, wt, bt)
    vocab = ws.shape[0]
    _check_scheme(scheme)
    if xs.shape[0] == 0:  # no tokens: nothing to run (the kernels' grid would be empty); zero gradients
        return _no_rows(xs), _no_rows(xs)
    chosen = scheme_of(scheme, xs, xt, vocab, setting)
    bs, bt = _bias(bs, vocab)[0], _bias(bt, vocab)[0]
    if chosen.scheme == "recompute":
        return _recomputed(xs, ws, bs, xt, wt, bt, setting, chosen.chunk, chosen.vchunk)
    if chosen.scheme == "stored":
        return _stored(xs, ws, bs, xt, wt, bt, setting, chosen.chunk)
    return _per_token(xs, ws, bs, xt, wt, bt, setting)


def _no_rows(xs: jax.Array) -> jax.Array:
    """float32 [0] from x_s [0, hidden]: differentiable, its gradient x_s's zeros (w_s and b_s get theirs as unused)."""
    return jnp.sum(xs.astype(jnp.float32), axis=1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _per_token(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
               setting: Setting) -> tuple[jax.Array, jax.Array]:
    out = forward(xs, ws, bs, xt, wt, bt, setting)
    return out.divergence, out.entropy


def _per_token_fwd(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
                   setting: Setting) -> tuple[tuple[jax.Array, jax.Array], tuple]:
    out = forward(xs, ws, bs, xt, wt, bt, setting)
    return (out.divergence, out.entropy), (xs, ws, bs, xt, wt, bt, out)


def _teacher_zeros(xt: jax.Array, wt: jax.Array, bt: jax.Array) -> tuple:
    return jnp.zeros_like(xt), jnp.zeros_like(wt), jnp.zeros_like(bt)


@hosts.emulated("distill.divergence")
def _per_token_bwd(setting: Setting, residuals: tuple, cotangents: tuple[jax.Array, jax.Array]) -> tuple:
    xs, ws, bs, xt, wt, bt, saved = residuals
    dx, dw, db = backward(xs, ws, bs, xt, wt, bt, setting, saved, *cotangents)
    return dx, dw, db.astype(bs.dtype), *_teacher_zeros(xt, wt, bt)


_per_token.defvjp(_per_token_fwd, _per_token_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7))
def _stored(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
            setting: Setting, chunk: int) -> tuple[jax.Array, jax.Array]:
    vectors, _ = stored.forward(xs, ws, bs, xt, wt, bt, setting, chunk)
    return vectors[0], vectors[1]


def _stored_fwd(*primals: Any) -> tuple[tuple[jax.Array, jax.Array], tuple]:
    """Symbolic zeros: the primals come as `CustomVJPPrimal`s (the setting and chunk as they are)."""
    xs, ws, bs, xt, wt, bt = (p.value for p in primals[:6])
    setting, chunk = primals[6:]
    vectors, q = stored.forward(xs, ws, bs, xt, wt, bt, setting, chunk)
    return (vectors[0], vectors[1]), (xs, ws, bs, xt, wt, bt, Forward(*vectors), q)


def _scheme_bwd(setting: Setting, operands: tuple, saved: Forward, cotangents: tuple,
                by_divergence: Callable[[jax.Array], tuple]) -> tuple:
    """The divergence's cotangent alone (TRL's case): `by_divergence(d_div)`, the scheme's backward from Q. With an
    entropy cotangent, whose gradient Q does not hold: the kernels' backward for both (one rounding of the whole
    gradient, as the kernels'), Q not made or read."""
    xs, ws, bs, xt, wt, bt = operands
    d_div, d_ent = (None if isinstance(c, SymbolicZero) else c for c in cotangents)
    if d_ent is not None:
        d_div = jnp.zeros_like(saved.divergence) if d_div is None else d_div
        dx, dw, db = backward(xs, ws, bs, xt, wt, bt, setting, saved, d_div, d_ent)
    elif d_div is not None:
        dx, dw, db = by_divergence(d_div)
    else:
        dx, dw, db = jnp.zeros_like(xs), jnp.zeros_like(ws), jnp.zeros_like(bs)
    return dx, dw, db.astype(bs.dtype), *_teacher_zeros(xt, wt, bt)


def _stored_bwd(setting: Setting, chunk: int, residuals: tuple, cotangents: tuple) -> tuple:
    """`stored.backward` from the forward's Q (`_scheme_bwd`)."""
    *operands, saved, q = residuals
    return _scheme_bwd(setting, tuple(operands), saved, cotangents,
                       lambda d_div: stored.backward(operands[0], operands[1], q, d_div))


_stored.defvjp(_stored_fwd, _stored_bwd, symbolic_zeros=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _recomputed(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array,
                setting: Setting, chunk: int, vchunk: int) -> tuple[jax.Array, jax.Array]:
    vectors = recompute.forward(xs, ws, bs, xt, wt, bt, setting, chunk)
    return vectors[0], vectors[1]


def _recomputed_fwd(*primals: Any) -> tuple[tuple[jax.Array, jax.Array], tuple]:
    """Symbolic zeros: the primals come as `CustomVJPPrimal`s (the setting and chunks as they are)."""
    xs, ws, bs, xt, wt, bt = (p.value for p in primals[:6])
    setting, chunk, _ = primals[6:]
    vectors = recompute.forward(xs, ws, bs, xt, wt, bt, setting, chunk)
    return (vectors[0], vectors[1]), (xs, ws, bs, xt, wt, bt, Forward(*vectors))


def _recomputed_bwd(setting: Setting, chunk: int, vchunk: int, residuals: tuple, cotangents: tuple) -> tuple:
    """`recompute.backward`, Q made again by vocabulary chunks from the forward's per-row vectors (`_scheme_bwd`)."""
    *operands, saved = residuals
    return _scheme_bwd(setting, tuple(operands), saved, cotangents, lambda d_div: recompute.backward(
        *operands, setting, (saved.student_lse, saved.teacher_lse, saved.aux), d_div, vchunk))


_recomputed.defvjp(_recomputed_fwd, _recomputed_bwd, symbolic_zeros=True)


@hosts.emulated("distill.divergence")
def divergence(student_hidden: jax.Array, student_weight: jax.Array, student_bias: jax.Array | None,
               teacher_hidden: jax.Array, teacher_weight: jax.Array, teacher_bias: jax.Array | None, *,
               beta: float, temperature: float = 1.0, student_scale: float = 1.0,
               student_soft_cap: float | None = None, teacher_scale: float = 1.0,
               teacher_soft_cap: float | None = None, scheme: str = "auto") -> tuple[jax.Array, jax.Array]:
    """TRL's `ChunkedDivergenceFunction` in JAX: per token (divergence, the student's entropy), float32
    [rows] each, differentiable in the student's hidden states, weight and bias (the package docstring
    has the math); `scheme` "auto", "kernels", "stored" or "recompute" (the module docstring)."""
    return per_token(student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias,
                     setting(beta, temperature, student_scale, student_soft_cap, teacher_scale, teacher_soft_cap),
                     scheme)


@hosts.emulated("distill.loss")
def loss(student_hidden: jax.Array, student_weight: jax.Array, student_bias: jax.Array | None,
         teacher_hidden: jax.Array, teacher_weight: jax.Array, teacher_bias: jax.Array | None, weights: jax.Array, *,
         beta: float, temperature: float = 1.0, student_scale: float = 1.0, student_soft_cap: float | None = None,
         teacher_scale: float = 1.0, teacher_soft_cap: float | None = None, chunk: int | str | None = "auto"
         ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The divergence as a step's loss: (sum_r weights_r divergence_r float32 [], the per-token divergence and the
    student's entropy float32 [rows]), differentiable in the student's hidden states, weight and bias through the
    loss alone. TRL's DistillationTrainer's loss is this with weights = the completion mask / num_items_in_batch (or
    / the valid tokens). `chunk`: "auto" (`fused.loss_chunk` on the chip being traced for), a chunk of rows for the
    fused scheme (`fused`: the gradients made in the forward, four matmuls in one chunk's memory), or None: the
    per-token call (`divergence`, "auto") weighted, which "auto" takes where its stored scheme fits and the fused
    one would add dw_s by `accumulate`'s pair (`fused.PAIR_SLOWER`), or the fused scheme fits no chunk."""
    xs, ws, bs, xt, wt, bt = student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias
    check(xs, ws, bs, xt, wt, bt)
    checks.array("distill", "weights", weights)
    if weights.shape != (xs.shape[0],):
        raise ValueError(f"tokamax distill: weights must be [rows] ({xs.shape[0]}), got {weights.shape}")
    kind = setting(beta, temperature, student_scale, student_soft_cap, teacher_scale, teacher_soft_cap)
    vocab = ws.shape[0]
    if chunk == "auto":
        chunk = fused.loss_chunk(kernels.sizes_of(xs, xt, vocab), roofline.chip(), kind)
    elif chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"tokamax distill: chunk must be \"auto\", a number of rows or None, got {chunk!r}")
    if chunk is None:
        div, entropy = per_token(xs, ws, bs, xt, wt, bt, kind)
        return jnp.sum(weights.astype(jnp.float32) * div), jax.lax.stop_gradient(div), jax.lax.stop_gradient(entropy)
    return fused.loss(xs, ws, _bias(bs, vocab)[0], xt, wt, _bias(bt, vocab)[0], weights, kind, chunk)
