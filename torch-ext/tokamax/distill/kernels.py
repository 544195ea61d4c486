"""The Pallas TPU kernels of the distillation divergence. Each grid step computes one [rows, vocab]
block of both models' logits, z_s = student(x_s @ w_s.T + b_s) and z_t = teacher(x_t @ w_t.T + b_t),
in float32 from a block of each model's hidden states and weight rows (matmuls in the operands'
dtype, accumulated in float32); no step keeps more than that block, so neither model's [tokens,
vocabulary] logits ever exist.

- `forward`: grid (row blocks, sweeps x vocabulary blocks), the vocabulary innermost. The first sweep
  keeps per row and model the running maximum m and s = sum e^(z-m) (online log-sum-exp), the
  student's S = sum e^(z_s-m_s) (z_s-m_s) (its entropy log s_s - S / s_s, shifted as the LM head's:
  `lm_head.kernels`), and for a KL the weighted gap between the models' shifted logits: for KL(p_t ||
  p_s) (beta 0) sum e^(z_t-m_t) ((z_t-m_t) - (z_s-m_s)), which is (KL + log s_t - log s_s) s_t; for
  KL(p_s || p_t) (beta 1) the same with the models' roles swapped. When a maximum moves, each sum is
  rebased as the entropy's is (the gap by both maxima's moves). The generalized JSD needs both
  normalized distributions at every column, so it sweeps the vocabulary a second time (the weight
  blocks indexed by the step modulo the vocabulary blocks): per column log m = log-add-exp(log p_s +
  log(1 - beta), log p_t + log beta), the JSD's terms beta p_t (log p_t - log m) + (1 - beta) p_s
  (log p_s - log m), and KL(p_s || m), which its gradient needs. Out (float32 [rows] each): the
  divergence, the student's entropy, both log-sum-exps and the backward's auxiliary sum (the KL
  itself, or KL(p_s || m) for the JSD).
- `backward_x` and `backward_w`: the gradient block G = d(loss)/d(the student's raw logits) recomputed
  from both models' logits, G = (g_div D + g_ent E) dz_s/dl with D = p_s - p_t (beta 0), p_s (log p_s
  - log p_t - KL) (beta 1), (1 - beta) p_s (log p_s - log m - KL(p_s || m)) (between), and E = -p_s
  (log p_s + H) (the entropy's), then dx_s = G @ w_s (grid rows, vocabulary) and dw_s = G.T @ x_s,
  db_s = sum G (grid vocabulary, rows). The teacher gets no gradient.

Inside a step, each kernel works its block `COMPUTE` vocabulary columns at a time in a `fori_loop`
(`lm_head.columns`): Mosaic compiles one iteration's code, not the whole block's unrolled (the JSD with its
gradients at 4,096 rows, student 2048, teacher 4096, vocabulary 151,936: 6.6 s for the v5e against 38.2).

Ragged sizes: the arrays are passed as they are and the last row and vocabulary blocks overhang them
(what is read past the end is undefined: NaN in interpret mode). Columns past the vocabulary are
masked out of every sum (selected away, never multiplied), the student's weight rows past it are zeroed
before dx's matmul and its hidden-state rows past the rows before dw's; what is written past the end
is dropped.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ..lm_head import columns
from ..lm_head.blocks import vmem_limit
from ..lm_head.transform import LogitTransform
from . import cost
from .blocks import Blocks, Sizes

OUTPUTS = ("divergence", "entropy", "student_lse", "teacher_lse", "aux")
COMPUTE = 1024
"""Vocabulary columns of one iteration of each kernel's loop over its block (`lm_head.columns`): Mosaic
compiles one iteration, not a wider block unrolled. As the LM head's (`lm_head.kernels.COMPUTE`): on the v5e,
256 columns took the JSD's forward and backward at 4,096 rows, student 2048, teacher 4096, vocabulary 151,936 to
227.7 ms where the whole block (1024 columns there) took 198.0."""
_WHOLE = contextvars.ContextVar("tokamax_distill_whole_blocks", default=False)


@contextlib.contextmanager
def whole_blocks() -> Iterator[None]:
    """Kernels traced within the block work each step's block at once, without the loop over `COMPUTE` columns
    (the bodies as they were before it: the chip benchmark's side-by-side)."""
    reset = _WHOLE.set(True)
    try:
        yield
    finally:
        _WHOLE.reset(reset)


def _width(blocks: Blocks) -> int:
    return blocks.vocab if _WHOLE.get() else columns.width(blocks.vocab, COMPUTE)
KINDS = ("forward_kl", "reverse_kl", "jsd")


@dataclasses.dataclass(frozen=True)
class Setting:
    """What the kernels compute (hashable: a static argument): TRL's beta, and each model's logit map with
    the shared temperature folded in."""

    beta: float
    student: LogitTransform
    teacher: LogitTransform

    @property
    def kind(self) -> str:
        """beta 0: KL(p_t || p_s); beta 1: KL(p_s || p_t); between: the generalized JSD (`KINDS`)."""
        return "forward_kl" if self.beta == 0.0 else "reverse_kl" if self.beta == 1.0 else "jsd"

    @property
    def sweeps(self) -> int:
        return 2 if self.kind == "jsd" else 1

    @property
    def soft_caps(self) -> int:
        return int(self.student.tanh) + int(self.teacher.tanh)


def sizes_of(xs: jax.Array, xt: jax.Array, vocab: int) -> Sizes:
    return Sizes(xs.shape[0], xs.shape[1], xt.shape[1], vocab, xs.dtype.itemsize, xt.dtype.itemsize)


def _params() -> pltpu.CompilerParams:
    return pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"),
                                vmem_limit_bytes=vmem_limit(pltpu.get_tpu_info().vmem_capacity_bytes))


def _logits(x_ref, w_ref, b_ref, transform: LogitTransform, offset, width: int  # noqa: ANN001
            ) -> tuple[jax.Array, jax.Array]:
    """(z, dz/dl) of `width` columns of this step's block from `offset`, float32 [rows, width]."""
    raw = jax.lax.dot_general(x_ref[...], w_ref[pl.ds(offset, width), :], (((1,), (1,)), ((), ())),
                              preferred_element_type=jnp.float32)
    return transform(raw + b_ref[:, pl.ds(offset, width)])


def _iota(shape: tuple[int, int], axis: int, block: int, index: jax.Array) -> jax.Array:
    return jax.lax.broadcasted_iota(jnp.int32, shape, axis) + index * block


def log_mixture(log_ps: jax.Array, log_pt: jax.Array, beta: float) -> jax.Array:
    """log((1 - beta) p_s + beta p_t), for 0 < beta < 1 (finite where both underflow); the stored scheme's too."""
    a, b = log_ps + math.log1p(-beta), log_pt + math.log(beta)
    return jnp.maximum(a, b) + jnp.log1p(jnp.exp(-jnp.abs(a - b)))


def forward(xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array, wt: jax.Array, bt: jax.Array, *,
            setting: Setting, blocks: Blocks) -> tuple[jax.Array, ...]:
    """The five per-row outputs (`OUTPUTS`), float32 [rows] each; biases float32 [1, vocab]."""
    vocab = ws.shape[0]
    sizes = sizes_of(xs, xt, vocab)
    nr, nv = blocks.grid(sizes)
    kind, sweeps, beta = setting.kind, setting.sweeps, setting.beta
    ragged = vocab % blocks.vocab != 0
    width = _width(blocks)

    def kernel(xs_ref, ws_ref, bs_ref, xt_ref, wt_ref, bt_ref, div_ref, ent_ref, lse_s_ref, lse_t_ref,  # noqa: ANN001
               aux_ref, ms, ss, sds, mt, st, acc, kl) -> None:  # noqa: ANN001
        k = pl.program_id(1)
        j = jax.lax.rem(k, nv)

        @pl.when(k == 0)
        def _init() -> None:
            ms[...], mt[...] = jnp.full_like(ms, -jnp.inf), jnp.full_like(mt, -jnp.inf)
            for ref in (ss, sds, st, acc, kl):
                ref[...] = jnp.zeros_like(ref)

        def part(offset, carry):  # noqa: ANN001, ANN202
            zs, _ = _logits(xs_ref, ws_ref, bs_ref, setting.student, offset, width)
            zt, _ = _logits(xt_ref, wt_ref, bt_ref, setting.teacher, offset, width)
            valid = _iota(zs.shape, 1, blocks.vocab, j) + offset < vocab if ragged else None

            def keep(v: jax.Array, fill: float = 0.0) -> jax.Array:
                return v if valid is None else jnp.where(valid, v, fill)

            def fold(z: jax.Array, m_ref, s_ref) -> tuple[jax.Array, ...]:  # noqa: ANN001
                """Columns into a model's online log-sum-exp: (e^(z-m'), z-m', the rescaling, m - m', old s)."""
                z_max = keep(z, -jnp.inf)
                m_old, s_old = m_ref[...], s_ref[...]
                m_new = jnp.maximum(m_old, jnp.max(z_max, axis=1))
                alpha = jnp.exp(m_old - m_new)
                e = jnp.exp(z_max - m_new[:, None])  # 0 in masked columns
                d = keep(z - m_new[:, None])
                s_ref[...] = s_old * alpha + jnp.sum(e, axis=1)
                m_ref[...] = m_new
                # the maximum's move, 0 before the first block (s 0 there, m -inf: no 0 * inf)
                return e, d, alpha, jnp.where(s_old > 0, m_old - m_new, 0.0), s_old

            @pl.when(k < nv)
            def _first_sweep() -> None:
                es, ds, alpha_s, shift_s, ss_old = fold(zs, ms, ss)
                et, dt, alpha_t, shift_t, st_old = fold(zt, mt, st)
                sds[...] = alpha_s * (sds[...] + shift_s * ss_old) + jnp.sum(es * ds, axis=1)
                if kind == "forward_kl":
                    acc[...] = alpha_t * (acc[...] + (shift_t - shift_s) * st_old) + jnp.sum(et * (dt - ds), axis=1)
                elif kind == "reverse_kl":
                    acc[...] = alpha_s * (acc[...] + (shift_s - shift_t) * ss_old) + jnp.sum(es * (ds - dt), axis=1)

            if sweeps == 2:
                @pl.when(k >= nv)
                def _second_sweep() -> None:
                    log_ps = zs - (ms[...] + jnp.log(ss[...]))[:, None]
                    log_pt = zt - (mt[...] + jnp.log(st[...]))[:, None]
                    log_m = log_mixture(log_ps, log_pt, beta)
                    kl_s = jnp.exp(log_ps) * (log_ps - log_m)
                    terms = beta * jnp.exp(log_pt) * (log_pt - log_m) + (1.0 - beta) * kl_s
                    acc[...] += jnp.sum(keep(terms), axis=1)
                    kl[...] += jnp.sum(keep(kl_s), axis=1)
            return carry

        columns.over(blocks.vocab, width, part, 0)

        @pl.when(k == sweeps * nv - 1)
        def _finish() -> None:
            log_ss, log_st = jnp.log(ss[...]), jnp.log(st[...])
            lse_s_ref[...] = ms[...] + log_ss
            lse_t_ref[...] = mt[...] + log_st
            ent_ref[...] = log_ss - sds[...] / ss[...]
            if kind == "forward_kl":
                div = acc[...] / st[...] - log_st + log_ss
            elif kind == "reverse_kl":
                div = acc[...] / ss[...] - log_ss + log_st
            else:
                div = acc[...]
            div_ref[...] = div
            aux_ref[...] = kl[...] if kind == "jsd" else div

    def vocab_block(i, k):  # noqa: ANN001, ANN202
        return (jax.lax.rem(k, nv), 0)

    row = pl.BlockSpec((blocks.rows,), lambda i, k: (i,))
    in_specs = []
    for hidden in (xs.shape[1], xt.shape[1]):
        in_specs += [pl.BlockSpec((blocks.rows, hidden), lambda i, k: (i, 0)),
                     pl.BlockSpec((blocks.vocab, hidden), vocab_block),
                     pl.BlockSpec((1, blocks.vocab), lambda i, k: (0, jax.lax.rem(k, nv)))]
    vector = jax.ShapeDtypeStruct((xs.shape[0],), jnp.float32)
    estimate = cost.forward(sizes, blocks, sweeps=sweeps, soft_caps=setting.soft_caps).estimate()
    return pl.pallas_call(
        kernel,
        grid=(nr, sweeps * nv),
        in_specs=in_specs,
        out_specs=[row] * len(OUTPUTS),
        out_shape=[vector] * len(OUTPUTS),
        scratch_shapes=[pltpu.VMEM((blocks.rows,), jnp.float32) for _ in range(7)],
        compiler_params=_params(),
        cost_estimate=estimate,
        name=f"tokamax_distill_{kind}_fwd_r{blocks.rows}_v{blocks.vocab}",
    )(xs, ws, bs, xt, wt, bt)


def _gradient_block(refs: tuple, i: jax.Array, j: jax.Array, offset, width: int, *, setting: Setting,  # noqa: ANN001
                    blocks: Blocks, rows: int, vocab: int) -> jax.Array:
    """G = d(loss)/d(the student's raw logits) of `width` columns of this step's block from `offset`, float32
    [rows, width]; 0 in the rows and columns past the arrays' ends."""
    lse_s, lse_t, aux, ent, g_div, g_ent, xs_ref, ws_ref, bs_ref, xt_ref, wt_ref, bt_ref = refs
    zs, dzs = _logits(xs_ref, ws_ref, bs_ref, setting.student, offset, width)
    zt, _ = _logits(xt_ref, wt_ref, bt_ref, setting.teacher, offset, width)
    log_ps = zs - lse_s[...][:, None]
    log_pt = zt - lse_t[...][:, None]
    ps = jnp.exp(log_ps)
    if setting.kind == "forward_kl":
        d = ps - jnp.exp(log_pt)
    elif setting.kind == "reverse_kl":
        d = ps * (log_ps - log_pt - aux[...][:, None])
    else:
        d = (1.0 - setting.beta) * ps * (log_ps - log_mixture(log_ps, log_pt, setting.beta) - aux[...][:, None])
    g = (g_div[...][:, None] * d - g_ent[...][:, None] * ps * (log_ps + ent[...][:, None])) * dzs
    valid = None
    if vocab % blocks.vocab:
        valid = _iota(g.shape, 1, blocks.vocab, j) + offset < vocab
    if rows % blocks.rows:
        live = _iota(g.shape, 0, blocks.rows, i) < rows
        valid = live if valid is None else valid & live
    return g if valid is None else jnp.where(valid, g, 0.0)


def _specs(blocks: Blocks, hidden_s: int, hidden_t: int, rows_first: bool) -> list[pl.BlockSpec]:
    """Six per-row vectors, then each model's x, w and bias, blocked for a grid of (row blocks, vocabulary
    blocks) or, with `rows_first` False, (vocabulary blocks, row blocks)."""
    def at(index):  # noqa: ANN001, ANN202 - index(i, j) of the row and vocabulary block, in the grid's order
        return (lambda i, j: index(i, j)) if rows_first else (lambda j, i: index(i, j))

    specs = [pl.BlockSpec((blocks.rows,), at(lambda i, j: (i,))) for _ in range(6)]
    for hidden in (hidden_s, hidden_t):
        specs += [pl.BlockSpec((blocks.rows, hidden), at(lambda i, j: (i, 0))),
                  pl.BlockSpec((blocks.vocab, hidden), at(lambda i, j: (j, 0))),
                  pl.BlockSpec((1, blocks.vocab), at(lambda i, j: (0, j)))]
    return specs


def backward_x(vectors: tuple[jax.Array, ...], xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array,
               wt: jax.Array, bt: jax.Array, *, setting: Setting, blocks: Blocks) -> jax.Array:
    """dx_s [rows, hidden_s] in x_s's dtype: G @ w_s, accumulated in float32 over the vocabulary blocks.
    `vectors`: the student's and teacher's lse, the auxiliary sum, the entropy, and the cotangents of the
    divergence and the entropy (float32 [rows] each)."""
    rows, hidden = xs.shape
    vocab = ws.shape[0]
    sizes = sizes_of(xs, xt, vocab)
    nr, nv = blocks.grid(sizes)
    ragged = vocab % blocks.vocab != 0
    width = _width(blocks)

    def kernel(*refs) -> None:  # noqa: ANN002
        ins, (dx_ref, acc) = refs[:12], refs[12:]
        i, j = pl.program_id(0), pl.program_id(1)

        @pl.when(j == 0)
        def _init() -> None:
            acc[...] = jnp.zeros_like(acc)

        def part(offset, carry):  # noqa: ANN001, ANN202
            g = _gradient_block(ins, i, j, offset, width, setting=setting, blocks=blocks, rows=rows, vocab=vocab)
            w = ins[7][pl.ds(offset, width), :]
            if ragged:
                w = jnp.where(_iota(w.shape, 0, blocks.vocab, j) + offset < vocab, w, jnp.zeros_like(w))
            acc[...] += jax.lax.dot_general(g.astype(w.dtype), w, (((1,), (0,)), ((), ())),
                                            preferred_element_type=jnp.float32)
            return carry

        columns.over(blocks.vocab, width, part, 0)

        @pl.when(j == nv - 1)
        def _finish() -> None:
            dx_ref[...] = acc[...].astype(dx_ref.dtype)

    estimate = cost.backward_x(sizes, blocks, mixture=setting.kind == "jsd", soft_caps=setting.soft_caps).estimate()
    return pl.pallas_call(
        kernel,
        grid=(nr, nv),
        in_specs=_specs(blocks, hidden, xt.shape[1], rows_first=True),
        out_specs=pl.BlockSpec((blocks.rows, hidden), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(xs.shape, xs.dtype),
        scratch_shapes=[pltpu.VMEM((blocks.rows, hidden), jnp.float32)],
        compiler_params=_params(),
        cost_estimate=estimate,
        name=f"tokamax_distill_{setting.kind}_dx_r{blocks.rows}_v{blocks.vocab}",
    )(*vectors, xs, ws, bs, xt, wt, bt)


def backward_w(vectors: tuple[jax.Array, ...], xs: jax.Array, ws: jax.Array, bs: jax.Array, xt: jax.Array,
               wt: jax.Array, bt: jax.Array, *, setting: Setting, blocks: Blocks) -> tuple[jax.Array, jax.Array]:
    """(dw_s [vocab, hidden_s] in w_s's dtype, db_s float32 [1, vocab]): G.T @ x_s and G's column sums,
    accumulated in float32 over the row blocks."""
    rows, hidden = xs.shape
    vocab = ws.shape[0]
    sizes = sizes_of(xs, xt, vocab)
    nr, nv = blocks.grid(sizes)
    ragged = rows % blocks.rows != 0
    width = _width(blocks)

    def kernel(*refs) -> None:  # noqa: ANN002
        ins, (dw_ref, db_ref, acc, bias_acc) = refs[:12], refs[12:]
        j, i = pl.program_id(0), pl.program_id(1)

        @pl.when(i == 0)
        def _init() -> None:
            acc[...] = jnp.zeros_like(acc)
            bias_acc[...] = jnp.zeros_like(bias_acc)

        x = ins[6][...]
        if ragged:
            x = jnp.where(_iota(x.shape, 0, blocks.rows, i) < rows, x, jnp.zeros_like(x))

        def part(offset, carry):  # noqa: ANN001, ANN202
            g = _gradient_block(ins, i, j, offset, width, setting=setting, blocks=blocks, rows=rows, vocab=vocab)
            acc[pl.ds(offset, width), :] += jax.lax.dot_general(g.astype(x.dtype), x, (((0,), (0,)), ((), ())),
                                                                preferred_element_type=jnp.float32)
            bias_acc[:, pl.ds(offset, width)] += jnp.sum(g, axis=0, keepdims=True)
            return carry

        columns.over(blocks.vocab, width, part, 0)

        @pl.when(i == nr - 1)
        def _finish() -> None:
            dw_ref[...] = acc[...].astype(dw_ref.dtype)
            db_ref[...] = bias_acc[...]

    estimate = cost.backward_w(sizes, blocks, mixture=setting.kind == "jsd", soft_caps=setting.soft_caps).estimate()
    return pl.pallas_call(
        kernel,
        grid=(nv, nr),
        in_specs=_specs(blocks, hidden, xt.shape[1], rows_first=False),
        out_specs=[pl.BlockSpec((blocks.vocab, hidden), lambda j, i: (j, 0)),
                   pl.BlockSpec((1, blocks.vocab), lambda j, i: (0, j))],
        out_shape=[jax.ShapeDtypeStruct(ws.shape, ws.dtype), jax.ShapeDtypeStruct((1, vocab), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((blocks.vocab, hidden), jnp.float32), pltpu.VMEM((1, blocks.vocab), jnp.float32)],
        compiler_params=_params(),
        cost_estimate=estimate,
        name=f"tokamax_distill_{setting.kind}_dw_r{blocks.rows}_v{blocks.vocab}",
    )(*vectors, xs, ws, bs, xt, wt, bt)
