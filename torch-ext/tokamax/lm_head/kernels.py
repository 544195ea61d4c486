"""The Pallas TPU kernels of the LM head's per-row statistics (ours: upstream's linear softmax
cross-entropy gives a row's log-sum-exp and label logit only). Each grid step computes one
[rows, vocab] block of the logits z = transform(x @ w.T + b) in float32 from a block of hidden
states and a block of weight rows; no step keeps more than that block, so the [tokens, vocabulary]
logits never exist.

- `forward`: grid (row blocks, vocabulary blocks), the vocabulary innermost; per row, online over the
  vocabulary: the running maximum m, s = sum e^(z-m), S = sum e^(z-m) (z-m), sum e^(2(z-m)), sum z,
  the target's logit and the maximum before the target. Out (float32 [rows] each): lse = m + log s,
  the target logit, the entropy log s - S / s, log sum p^2, sum z, and top-1 (1.0 where the target
  is the first maximum). The entropy is accumulated shifted by the running maximum, never as
  lse - E_p[z]: at logits of ~40 those two agree to ~1e-6 and their float32 difference is off by
  ~ulp(40) = 4e-6 (negative for a confident token); shifted, every term of S is <= 0 and s >= 1, so
  the entropy is >= 0 and exact to float32's rounding of itself. When the maximum moves from m to m',
  S carries over as e^(m-m') (S + (m - m') s).
- `backward_x` and `backward_w`: the gradient block G = d(loss)/d(raw logits) recomputed from the
  logits, G = (p (a + b log p) + c [j = target] + d) dz/dl with log p = z - lse and per-row
  coefficients (a, b, c, d) from the outputs' cotangents (`stats.coefficients`), then dx = G @ w
  (grid rows, vocabulary) and dw = G.T @ x, db = sum G (grid vocabulary, rows): each kernel
  recomputes the logits once. A row whose lse is +inf (a padded row) has p = 0 and G = 0.

Inside a step, each kernel works its block `COMPUTE` vocabulary columns at a time in a `fori_loop`
(`columns`; the forward's running statistics carried through it; dx's accumulator and dw's rows updated
per iteration), so that Mosaic compiles one iteration's code, not the whole block's unrolled: the grid,
the HBM blocks and what is read are the same either way.

Shapes: x [rows, hidden] and w [vocab, hidden] (nn.Linear's layout) of one float dtype, b [1, n]
float32 with n at least the vocabulary grid's columns, per-row vectors [rows]; rows a multiple of the
row block (`stats` pads), `true_vocab` the columns that are real. The vocabulary axis has
ceil(vocab / block) steps: the last block runs past the weight's rows where the block does not divide
the vocabulary, and what it reads there is undefined (NaN in interpret mode). Every statistic masks
those columns with a select (never a product: 0 * NaN is NaN), G is 0 there, and dx's matmul reads
the block's weight rows past the vocabulary as 0; dw's and db's rows there are never written.

`transposed`: every kernel also takes x.T [hidden, rows] and w.T [hidden, vocab] (blocks (hidden, rows)
and (hidden, vocab), the logits a contraction over dimension 0 of both) and gives dx.T [hidden, rows]
= w.T G.T and dw.T [hidden, vocab] = x.T G. Where the hidden size is not a multiple of 128 the TPU
keeps a [n, hidden] array column-major (no lane padding that way), so its transpose is row-major in
place: handed the transposes (`stats`), the kernels read and write the caller's arrays without XLA
transposing a copy of x, w, dx and dw around them (2.3 GiB at gpt-oss's hidden 2880). One kernel body
each: the flag picks the block specs and the matmuls' dimension numbers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import columns, cost
from .blocks import Blocks, vmem_limit
from .transform import LogitTransform

FORWARD_OUTPUTS = ("lse", "target_logit", "entropy", "log_sum_sq_probs", "sum_logits", "top1")
"""The forward kernel's outputs, in its order (`stats.RowStats` gives them, and the mean logit, in the public one)."""
COMPUTE = {"forward": 1024, "backward_x": 1024, "backward_w": 1024}
"""Vocabulary columns one iteration of each kernel's inner loop computes (`columns`): Mosaic compiles one
[rows, COMPUTE] iteration, not a wider block unrolled. The v5e timed the widths at Llama 3 8B's head
(benchmarks/measured/v5e-2026-12-04-bench-lm_head_columns-8b33815.json): the forward 93.9 ms at 256 columns,
69.8 at 512, 66.9 at 1024 and 2048, 66.8 over the whole block (1024 there); forward and backward 244.6 ms at 1024
as whole. Narrow iterations serialize each slice's statistics after its matmul, so 1024; compiling a wider block
than the v5e's (v6e's, v7x's) loops over it. `Blocks.compute` overrides it per call (the block's own vocabulary:
the whole block at once)."""
LOG_P_FLOOR = -1e4
"""log p is floored here in the backward: e^-1e4 is 0 in float32 as e^-inf is, but 0 times it stays 0 (a padded
row's lse is +inf, its coefficients 0)."""


def _params(semantics: tuple[str, ...]) -> pltpu.CompilerParams:
    """The scoped VMEM limit `blocks.choose` fits the blocks to (the compiler's default is far smaller)."""
    return pltpu.CompilerParams(dimension_semantics=semantics,
                                vmem_limit_bytes=vmem_limit(pltpu.get_tpu_info().vmem_capacity_bytes))


def _sizes(x: jax.Array, w: jax.Array, transposed: bool) -> tuple[int, int, int]:
    """(rows, hidden, vocab) of x and w as stored (`transposed`: x.T and w.T)."""
    return (x.shape[1], x.shape[0], w.shape[1]) if transposed else (x.shape[0], x.shape[1], w.shape[0])


def _cost(model, x: jax.Array, w: jax.Array, blocks: Blocks, transform: LogitTransform,  # noqa: ANN001
          transposed: bool) -> pl.CostEstimate:
    """What the kernel declares to XLA, from `cost` (the grid and block specs below)."""
    rows, hidden, vocab = _sizes(x, w, transposed)
    return model(rows, hidden, vocab, x.dtype.itemsize, blocks, soft_cap=transform.tanh,
                 transposed=transposed).estimate()


def _width(kernel: str, blocks: Blocks) -> int:
    """The columns of one inner iteration of `kernel` (the blocks' own, else `COMPUTE`)."""
    return columns.width(blocks.vocab, blocks.compute or COMPUTE.get(kernel))


def _vocab_rows(ref, offset, width: int, transposed: bool) -> jax.Array:  # noqa: ANN001
    """`width` weight rows from `offset` of a block of w (or `width` columns of a block of w.T)."""
    return ref[:, pl.ds(offset, width)] if transposed else ref[pl.ds(offset, width), :]


def _contract(a: jax.Array, b: jax.Array, dims: tuple[int, int]) -> jax.Array:
    """a and b contracted over dimension dims[0] of a and dims[1] of b, in float32."""
    return jax.lax.dot_general(a, b, (((dims[0],), (dims[1],)), ((), ())), preferred_element_type=jnp.float32)


def _logits(x_ref, w_ref, b_ref, transform: LogitTransform, transposed: bool, offset, width: int  # noqa: ANN001
            ) -> tuple[jax.Array, jax.Array]:
    """(z, dz/dl) of `width` columns of this step's block from `offset`, float32 [rows, width]: x w.T, or
    (x.T).T (w.T)."""
    raw = _contract(x_ref[...], _vocab_rows(w_ref, offset, width, transposed), (0, 0) if transposed else (1, 1))
    return transform(raw + b_ref[:, pl.ds(offset, width)])


def _columns(shape: tuple[int, int], block: int, j: jax.Array) -> jax.Array:
    return jax.lax.broadcasted_iota(jnp.int32, shape, 1) + j * block


def _vocab_steps(vocab: int, blocks: Blocks, true_vocab: int) -> tuple[int, bool]:
    """(vocabulary grid steps over the weight's `vocab` rows, whether any column of the grid is past
    `true_vocab`)."""
    nv = -(-vocab // blocks.vocab)
    return nv, true_vocab != nv * blocks.vocab


def forward(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, *, transform: LogitTransform,
            blocks: Blocks, true_vocab: int, transposed: bool = False) -> tuple[jax.Array, ...]:
    """The six per-row outputs (`FORWARD_OUTPUTS`), float32 [rows] each."""
    rows, hidden, vocab = _sizes(x, w, transposed)
    nv, masked = _vocab_steps(vocab, blocks, true_vocab)
    width = _width("forward", blocks)

    def kernel(t_ref, x_ref, w_ref, b_ref, lse_ref, zt_ref, ent_ref, lsq_ref, sum_ref, top_ref,  # noqa: ANN001
               m_s, s_s, sd_s, sq_s, before_s) -> None:  # noqa: ANN001
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _init() -> None:
            for ref in (m_s, before_s):
                ref[...] = jnp.full_like(ref, -jnp.inf)
            for ref in (s_s, sd_s, sq_s, zt_ref, sum_ref):
                ref[...] = jnp.zeros_like(ref)

        target = t_ref[...][:, None]

        def part(offset, carry):  # noqa: ANN001, ANN202
            m_old, s_old, sd_old, sq_old, sum_old, zt_old, before_old = carry
            z, _ = _logits(x_ref, w_ref, b_ref, transform, transposed, offset, width)
            col = _columns(z.shape, blocks.vocab, j) + offset
            valid = col < true_vocab
            z_max = jnp.where(valid, z, -jnp.inf) if masked else z
            m_new = jnp.maximum(m_old, jnp.max(z_max, axis=1))
            alpha = jnp.exp(m_old - m_new)
            shifted = z - m_new[:, None]
            if masked:  # undefined (NaN) past the vocabulary: 0 there, so that e * shifted is 0
                shifted = jnp.where(valid, shifted, 0.0)
            e = jnp.exp(z_max - m_new[:, None])  # 0 in masked columns
            # S rebased from m_old to m_new: e^(m_old-m_new) (S + (m_old - m_new) s); nothing to carry before the
            # first block (s = 0 there, and m_old = -inf would make 0 * inf)
            carried = jnp.where(s_old > 0, alpha * (sd_old + (m_old - m_new) * s_old), 0.0)
            return (m_new, s_old * alpha + jnp.sum(e, axis=1), carried + jnp.sum(e * shifted, axis=1),
                    sq_old * (alpha * alpha) + jnp.sum(e * e, axis=1),
                    sum_old + jnp.sum(jnp.where(valid, z, 0.0) if masked else z, axis=1),
                    zt_old + jnp.sum(jnp.where(col == target, z, 0.0), axis=1),
                    jnp.maximum(before_old, jnp.max(jnp.where(col < target, z_max, -jnp.inf), axis=1)))

        running = (m_s, s_s, sd_s, sq_s, sum_ref, zt_ref, before_s)
        out = columns.over(blocks.vocab, width, part, tuple(ref[...] for ref in running))
        for ref, value in zip(running, out, strict=True):
            ref[...] = value

        @pl.when(j == nv - 1)
        def _finish() -> None:
            m, s = m_s[...], s_s[...]
            log_s = jnp.log(s)
            lse_ref[...] = m + log_s
            ent_ref[...] = log_s - sd_s[...] / s
            lsq_ref[...] = jnp.log(sq_s[...]) - 2.0 * log_s
            zt = zt_ref[...]
            top_ref[...] = ((zt >= m) & (zt > before_s[...])).astype(jnp.float32)

    row = pl.BlockSpec((blocks.rows,), lambda i, j: (i,))
    vector = jax.ShapeDtypeStruct((rows,), jnp.float32)
    scratch = [pltpu.VMEM((blocks.rows,), jnp.float32) for _ in range(5)]
    return pl.pallas_call(
        kernel,
        grid=(rows // blocks.rows, nv),
        in_specs=_operand_specs(blocks, hidden, 1, rows_first=True, transposed=transposed),  # targets, x, w, b
        out_specs=[row] * len(FORWARD_OUTPUTS),
        out_shape=[vector] * len(FORWARD_OUTPUTS),
        scratch_shapes=scratch,
        compiler_params=_params(("parallel", "arbitrary")),
        cost_estimate=_cost(cost.forward, x, w, blocks, transform, transposed),
        name=f"tokamax_lm_head_fwd{_suffix(blocks, transposed)}",
    )(targets, x, w, b)


def _gradient_block(x_ref, w_ref, b_ref, t_ref, lse_ref, a_ref, bz_ref, c_ref, d_ref, j, offset,  # noqa: ANN001
                    *, transform: LogitTransform, block: int, width: int, true_vocab: int | None, transposed: bool
                    ) -> jax.Array:
    """G = d(loss)/d(raw logits) of `width` columns of this step's block from `offset`, float32 [rows, width];
    0 in the columns past `true_vocab` (None: none are)."""
    z, dz = _logits(x_ref, w_ref, b_ref, transform, transposed, offset, width)
    col = _columns(z.shape, block, j) + offset
    log_p = jnp.maximum(z - lse_ref[...][:, None], LOG_P_FLOOR)
    p = jnp.exp(log_p)
    g = p * (a_ref[...][:, None] + bz_ref[...][:, None] * log_p) + d_ref[...][:, None]
    g = g + jnp.where(col == t_ref[...][:, None], c_ref[...][:, None], 0.0)
    g = g * dz
    return g if true_vocab is None else jnp.where(col < true_vocab, g, 0.0)


def _suffix(blocks: Blocks, transposed: bool) -> str:
    return f"_r{blocks.rows}_v{blocks.vocab}" + ("_t" if transposed else "")


def _along(block: int, hidden: int, transposed: bool, index):  # noqa: ANN001, ANN202
    """(block shape, index map) of x's or w's blocks of `block` rows over the whole hidden size, or of
    their transposes' `block` columns; `index(i, j)` the block's number along the rows or vocabulary."""
    if transposed:
        return (hidden, block), lambda i, j: (0, index(i, j))
    return (block, hidden), lambda i, j: (index(i, j), 0)


def _operand_specs(blocks: Blocks, hidden: int, vectors: int, rows_first: bool, transposed: bool
                   ) -> list[pl.BlockSpec]:
    """`vectors` per-row vectors, then x, w and the bias, blocked for a grid of (row blocks, vocabulary
    blocks) or, with `rows_first` False, (vocabulary blocks, row blocks)."""
    def at(index):  # noqa: ANN001, ANN202 - index(i, j) of the row and vocabulary block, in the grid's order
        return (lambda i, j: index(i, j)) if rows_first else (lambda j, i: index(i, j))

    x_shape, x_index = _along(blocks.rows, hidden, transposed, lambda i, j: i)
    w_shape, w_index = _along(blocks.vocab, hidden, transposed, lambda i, j: j)
    return [*(pl.BlockSpec((blocks.rows,), at(lambda i, j: (i,))) for _ in range(vectors)),
            pl.BlockSpec(x_shape, at(x_index)),
            pl.BlockSpec(w_shape, at(w_index)),
            pl.BlockSpec((1, blocks.vocab), at(lambda i, j: (0, j)))]


def backward_x(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, lse: jax.Array, a: jax.Array,
               bz: jax.Array, c: jax.Array, d: jax.Array, *, transform: LogitTransform, blocks: Blocks,
               true_vocab: int, transposed: bool = False) -> jax.Array:
    """dx [rows, hidden] in x's dtype: G @ w, accumulated in float32 over the vocabulary blocks
    (`transposed`: dx.T [hidden, rows] = w.T G.T)."""
    rows, hidden, vocab = _sizes(x, w, transposed)
    nv, masked = _vocab_steps(vocab, blocks, true_vocab)
    width = _width("backward_x", blocks)
    grad = functools.partial(_gradient_block, transform=transform, block=blocks.vocab, width=width,
                             true_vocab=true_vocab if masked else None, transposed=transposed)
    vocab_axis = 1 if transposed else 0  # of w's block
    out_shape, out_index = _along(blocks.rows, hidden, transposed, lambda i, j: i)

    def kernel(t_ref, lse_ref, a_ref, b_ref_, c_ref, d_ref, x_ref, w_ref, bias_ref, dx_ref, acc):  # noqa: ANN001
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _init() -> None:
            acc[...] = jnp.zeros_like(acc)

        def part(offset, carry):  # noqa: ANN001, ANN202
            g = grad(x_ref, w_ref, bias_ref, t_ref, lse_ref, a_ref, b_ref_, c_ref, d_ref, j, offset)
            w = _vocab_rows(w_ref, offset, width, transposed)
            if masked:  # the weight rows past the vocabulary are undefined: 0 there, so that G @ w stays finite
                vocab_index = jax.lax.broadcasted_iota(jnp.int32, w.shape, vocab_axis) + j * blocks.vocab + offset
                w = jnp.where(vocab_index < true_vocab, w, 0)
            g = g.astype(w.dtype)
            acc[...] += _contract(w, g, (1, 1)) if transposed else _contract(g, w, (1, 0))
            return carry

        columns.over(blocks.vocab, width, part, 0)

        @pl.when(j == nv - 1)
        def _finish() -> None:
            dx_ref[...] = acc[...].astype(dx_ref.dtype)

    return pl.pallas_call(
        kernel,
        grid=(rows // blocks.rows, nv),
        # targets, lse, a, b, c, d, x, w, b
        in_specs=_operand_specs(blocks, hidden, 6, rows_first=True, transposed=transposed),
        out_specs=pl.BlockSpec(out_shape, out_index),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM(out_shape, jnp.float32)],
        compiler_params=_params(("parallel", "arbitrary")),
        cost_estimate=_cost(cost.backward_x, x, w, blocks, transform, transposed),
        name=f"tokamax_lm_head_dx{_suffix(blocks, transposed)}",
    )(targets, lse, a, bz, c, d, x, w, b)


def backward_w(x: jax.Array, w: jax.Array, b: jax.Array, targets: jax.Array, lse: jax.Array, a: jax.Array,
               bz: jax.Array, c: jax.Array, d: jax.Array, *, transform: LogitTransform, blocks: Blocks,
               true_vocab: int, transposed: bool = False) -> tuple[jax.Array, jax.Array]:
    """(dw [vocab, hidden] in w's dtype, db float32 [1, vocab]): G.T @ x and G's column sums,
    accumulated in float32 over the row blocks (`transposed`: dw.T [hidden, vocab] = x.T G)."""
    rows, hidden, vocab = _sizes(x, w, transposed)
    nr = rows // blocks.rows
    nv, masked = _vocab_steps(vocab, blocks, true_vocab)
    width = _width("backward_w", blocks)
    grad = functools.partial(_gradient_block, transform=transform, block=blocks.vocab, width=width,
                             true_vocab=true_vocab if masked else None, transposed=transposed)
    out_shape, out_index = _along(blocks.vocab, hidden, transposed, lambda i, j: j)

    def kernel(t_ref, lse_ref, a_ref, b_ref_, c_ref, d_ref, x_ref, w_ref, bias_ref, dw_ref, db_ref,  # noqa: ANN001
               acc, bias_acc) -> None:  # noqa: ANN001
        j, i = pl.program_id(0), pl.program_id(1)

        @pl.when(i == 0)
        def _init() -> None:
            acc[...] = jnp.zeros_like(acc)
            bias_acc[...] = jnp.zeros_like(bias_acc)

        def part(offset, carry):  # noqa: ANN001, ANN202
            g = grad(x_ref, w_ref, bias_ref, t_ref, lse_ref, a_ref, b_ref_, c_ref, d_ref, j, offset)
            g_in, x = g.astype(x_ref.dtype), x_ref[...]
            if transposed:
                acc[:, pl.ds(offset, width)] += _contract(x, g_in, (1, 0))
            else:
                acc[pl.ds(offset, width), :] += _contract(g_in, x, (0, 0))
            bias_acc[:, pl.ds(offset, width)] += jnp.sum(g, axis=0, keepdims=True)
            return carry

        columns.over(blocks.vocab, width, part, 0)

        @pl.when(i == nr - 1)
        def _finish() -> None:
            dw_ref[...] = acc[...].astype(dw_ref.dtype)
            db_ref[...] = bias_acc[...]

    return pl.pallas_call(
        kernel,
        grid=(nv, nr),
        in_specs=_operand_specs(blocks, hidden, 6, rows_first=False, transposed=transposed),
        out_specs=[pl.BlockSpec(out_shape, lambda j, i: out_index(i, j)),
                   pl.BlockSpec((1, blocks.vocab), lambda j, i: (0, j))],
        out_shape=[jax.ShapeDtypeStruct(w.shape, w.dtype), jax.ShapeDtypeStruct((1, vocab), jnp.float32)],
        scratch_shapes=[pltpu.VMEM(out_shape, jnp.float32), pltpu.VMEM((1, blocks.vocab), jnp.float32)],
        compiler_params=_params(("parallel", "arbitrary")),
        cost_estimate=_cost(cost.backward_w, x, w, blocks, transform, transposed),
        name=f"tokamax_lm_head_dw{_suffix(blocks, transposed)}",
    )(targets, lse, a, bz, c, d, x, w, b)
