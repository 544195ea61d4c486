"""What each distillation kernel costs, from its grid and block specs: the `pl.CostEstimate` every
`pallas_call` in `kernels` declares (XLA's scheduler and `compiled.cost_analysis()` read it).

HBM traffic follows the pipeline: a block indexed by the outer grid axis is read once in all, one
indexed by the inner axis once per outer step, and once per sweep where the forward sweeps the
vocabulary twice (the generalized JSD: the first sweep gives both normalizers, the second the
divergence). The forward and dx run over (row blocks, vocabulary blocks): both models' hidden states
and the per-row vectors once, both weights and biases once per row block (and sweep). dw runs over
(vocabulary blocks, row blocks): the weights once, the hidden states and vectors once per vocabulary
block. Reads are of whole blocks (an overhanging last block is read whole). Flops are the matmuls'
(2 m n k): both models' logits in every kernel and sweep, G @ w_s or G.T @ x_s in the backward.
Transcendentals per logit pair: the first sweep two exps (one per model), the second four (p_s, p_t
and the mixture's log-add-exp), the backward two (p_s, p_t) and two more for the mixture; a tanh per
capped model wherever its logits are made.

`stored`: the stored scheme's (`distill.stored`: plain XLA, no grid) forward and backward together, its
roofline and its temporaries. `recompute`: the same of the scheme that recomputes Q by vocabulary chunks in the
backward (`distill.recompute`).
"""

from __future__ import annotations

import dataclasses

from jax.experimental import pallas as pl

from .. import roofline
from ..lm_head.blocks import round_up
from ..lm_head.cost import StoredCost
from .blocks import Blocks, Sizes

F32 = 4
FORWARD_OUTPUTS = 5  # divergence, entropy, both log-sum-exps, the backward's auxiliary sum
BACKWARD_VECTORS = 6  # both log-sum-exps, the auxiliary sum, the entropy, the two cotangents
STORED_LOGITS = 2
"""[chunk, vocab] float32 arrays the stored scheme's chunk holds: both models' logits (XLA fuses what is made from
them into the reductions and Q's write)."""


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One kernel's cost over its whole grid."""

    kernel: str
    grid: tuple[int, int]
    flops: int
    transcendentals: int
    bytes_read: int
    bytes_written: int
    vmem_bytes: int

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    def seconds(self, on: roofline.Chip) -> float:
        """`roofline.seconds` on `on` (the kernels' blocks are multiples of the MXU: a full fill)."""
        return roofline.seconds(self.flops, self.bytes_accessed, self.grid[0] * self.grid[1], on)

    def estimate(self) -> pl.CostEstimate:
        return pl.CostEstimate(flops=self.flops, transcendentals=self.transcendentals,
                               bytes_accessed=self.bytes_accessed)


def _blocked(sizes: Sizes, blocks: Blocks) -> tuple[int, int, int, int]:
    """(row blocks, vocabulary blocks, rows and vocabulary as read: whole blocks)."""
    nr, nv = blocks.grid(sizes)
    return nr, nv, nr * blocks.rows, nv * blocks.vocab


def _weights(sizes: Sizes, vocab: int) -> int:
    return vocab * (sizes.student_hidden * sizes.student_itemsize + sizes.teacher_hidden * sizes.teacher_itemsize
                    + 2 * F32)


def _hidden(sizes: Sizes, rows: int) -> int:
    return rows * (sizes.student_hidden * sizes.student_itemsize + sizes.teacher_hidden * sizes.teacher_itemsize)


def _logit_flops(rows: int, vocab: int, sizes: Sizes) -> int:
    return 2 * rows * vocab * (sizes.student_hidden + sizes.teacher_hidden)


def forward(sizes: Sizes, blocks: Blocks, *, sweeps: int, soft_caps: int = 0) -> KernelCost:
    """`sweeps` 1 (a KL) or 2 (the generalized JSD); `soft_caps` how many models cap their logits."""
    nr, nv, rows, vocab = _blocked(sizes, blocks)
    logits = rows * vocab
    read = _hidden(sizes, rows) + sweeps * nr * _weights(sizes, vocab)
    per_logit = 2 + soft_caps + (sweeps - 1) * (4 + soft_caps)
    return KernelCost("forward", (nr, sweeps * nv), sweeps * _logit_flops(rows, vocab, sizes),
                      logits * per_logit + 2 * rows * nv + 4 * rows, read, FORWARD_OUTPUTS * sizes.rows * F32,
                      blocks.kernel_vmem_bytes("forward", sizes))


def backward_x(sizes: Sizes, blocks: Blocks, *, mixture: bool, soft_caps: int = 0) -> KernelCost:
    nr, nv, rows, vocab = _blocked(sizes, blocks)
    flops = _logit_flops(rows, vocab, sizes) + 2 * rows * vocab * sizes.student_hidden
    read = _hidden(sizes, rows) + BACKWARD_VECTORS * rows * F32 + nr * _weights(sizes, vocab)
    return KernelCost("backward_x", (nr, nv), flops, rows * vocab * (2 + 2 * mixture + soft_caps), read,
                      sizes.rows * sizes.student_hidden * sizes.student_itemsize,
                      blocks.kernel_vmem_bytes("backward_x", sizes))


def backward_w(sizes: Sizes, blocks: Blocks, *, mixture: bool, soft_caps: int = 0) -> KernelCost:
    nr, nv, rows, vocab = _blocked(sizes, blocks)
    flops = _logit_flops(rows, vocab, sizes) + 2 * rows * vocab * sizes.student_hidden
    read = _weights(sizes, vocab) + nv * (_hidden(sizes, rows) + BACKWARD_VECTORS * rows * F32)
    written = sizes.vocab * (sizes.student_hidden * sizes.student_itemsize + F32)  # dw, db
    return KernelCost("backward_w", (nv, nr), flops, rows * vocab * (2 + 2 * mixture + soft_caps), read, written,
                      blocks.kernel_vmem_bytes("backward_w", sizes))


def costs(sizes: Sizes, blocks: Blocks | dict[str, Blocks], *, beta: float, soft_caps: int = 0
          ) -> dict[str, KernelCost]:
    """The three kernels' costs at `beta` (0 and 1 are KLs: one forward sweep, no mixture), by name; `blocks`
    one for all three or each kernel's by name."""
    mixture = 0.0 < beta < 1.0
    by = blocks if isinstance(blocks, dict) else dict.fromkeys(("forward", "backward_x", "backward_w"), blocks)
    return {"forward": forward(sizes, by["forward"], sweeps=1 + mixture, soft_caps=soft_caps),
            "backward_x": backward_x(sizes, by["backward_x"], mixture=mixture, soft_caps=soft_caps),
            "backward_w": backward_w(sizes, by["backward_w"], mixture=mixture, soft_caps=soft_caps)}


STORED_VECTOR_SECONDS = 9.5e-12
"""Seconds per logit (of both models) of the stored scheme's forward beyond its roofline: both softmaxes, the
divergence and Q, XLA's elementwise and reduction passes over each chunk's float32 logits, after its matmuls.
Measured on the v5e (benchmarks/measured/v5e-2026-12-04-bench-lm_head-d7df2f0.json): the forward 58.0 ms at 4,096
rows, student 2048, teacher 4096, vocabulary 151,936 against a roofline of 46.2 (11.9 ms over 1.25e9 logits); with
it the forward and backward (94.1 ms measured) is predicted at 88.8. Other chips: scaled by their matmul peak."""


def stored(sizes: Sizes, chunk: int, *, weight_grad: bool = True, bias_grad: bool = False,
           backward: bool = True) -> StoredCost:
    """The stored scheme in chunks of `chunk` rows (the rows padded to a multiple). Flops: both models' logits,
    then dx = g (Q @ w_s) and dw = Q.T @ (g x_s) (dw's not for a frozen head; none without `backward`, a forward
    alone). Bytes: per chunk both weights and biases read, the chunk's hidden states read, both models' float32
    logits written and read once, the five per-row vectors written; Q written in the student's dtype where there is
    a backward (a forward alone does not make it: XLA drops it); the backward reads Q and w_s and writes dx, reads
    Q and x_s and writes dw (and reads Q for db with `bias_grad`). Temporaries: Q, the per-row vectors, one chunk's
    `STORED_LOGITS` float32 logits."""
    rows = round_up(sizes.rows, chunk)
    chunks = rows // chunk
    hs, ht = sizes.student_hidden * sizes.student_itemsize, sizes.teacher_hidden * sizes.teacher_itemsize
    q = rows * sizes.vocab * sizes.student_itemsize
    logits = STORED_LOGITS * chunk * sizes.vocab * F32
    moved = chunks * (sizes.vocab * (hs + ht + 2 * F32) + 2 * logits) + rows * (hs + ht) \
        + FORWARD_OUTPUTS * rows * F32
    flops = _logit_flops(rows, sizes.vocab, sizes)
    if backward:
        moved += 2 * q + sizes.vocab * hs + rows * hs  # Q written by the forward, read for dx
        flops += 2 * rows * sizes.vocab * sizes.student_hidden
        if weight_grad:
            moved += q + rows * hs + sizes.vocab * hs
            flops += 2 * rows * sizes.vocab * sizes.student_hidden
        if bias_grad:
            moved += q + sizes.vocab * F32
    return StoredCost(chunk, flops, moved, q + FORWARD_OUTPUTS * rows * F32 + logits, 2 * rows * sizes.vocab,
                      STORED_VECTOR_SECONDS)


RECOMPUTE_LOGITS = 1
"""[rows, columns] float32 arrays a step of the recompute scheme's backward holds beside Q's columns: the student's
logits (XLA fuses the teacher's matmul into the fusion that writes Q in the student's dtype, Q's arithmetic its output
fusion). The v5e's compiler (libtpu 0.0.52, compile-only) at 16,384 rows of Gemma 2 2B <- 9B's heads, 8,192 columns
a step, the forward's chunks made small: 956.7 MB of temporaries, where this model counts 956.6."""


@dataclasses.dataclass(frozen=True)
class RecomputeCost(StoredCost):
    """`StoredCost` with each phase's temporaries: `temp_bytes` is the larger (the forward's are freed before the
    backward runs)."""

    forward_bytes: int = 0
    backward_bytes: int = 0


def recompute(sizes: Sizes, vchunk: int, *, chunk: int, weight_grad: bool = True, bias_grad: bool = False,
              backward: bool = True) -> RecomputeCost:
    """The recompute scheme (`distill.recompute`): its forward in chunks of `chunk` rows (the rows padded to a
    multiple), its backward `vchunk` vocabulary columns a step (the columns left one narrower step). Flops: both
    models' logits in the forward and again in the backward, dx = g (Q @ w_s) and dw = Q.T @ (g x_s) (dw's not for a
    frozen head; nothing past the forward's without `backward`). Bytes: the forward's as `stored`'s without Q; the
    backward's both weights and biases read once and w_s again by dx's matmul, per step both models' hidden states
    read and dx_s's float32 accumulator read and written (and x_s again by dw's matmul, g x_s made in its operand's
    fusion), both models' float32 logits written and read once, Q written once and read by dx's matmul, dw's and
    (`bias_grad`) db's, dx_s and dw_s written. Temporaries: the forward's `STORED_LOGITS` float32 [chunk, vocab]
    arrays and the per-row vectors; the backward's `RECOMPUTE_LOGITS` float32 [rows, columns] arrays, Q's columns
    in the student's dtype, dx_s's float32 accumulator and the per-row vectors; the larger of the two. Vector work
    beyond the roofline (`STORED_VECTOR_SECONDS`) per logit of the forward's: the backward's runs in the teacher's
    matmul's output fusion, under the MXU (measured on the v5e at 4,096 rows of Gemma 2 2B <- 9B: 212.5 ms, where its
    34.4 TFLOP take 207.4 at the measured peak; this model says 227.3, and 909 against 866 measured at 16,384)."""
    rows = round_up(sizes.rows, chunk)
    chunks = rows // chunk
    hs, ht = sizes.student_hidden * sizes.student_itemsize, sizes.teacher_hidden * sizes.teacher_itemsize
    weights = sizes.vocab * (hs + ht + 2 * F32)
    vectors = FORWARD_OUTPUTS * sizes.rows * F32
    logits = STORED_LOGITS * chunk * sizes.vocab * F32
    moved = chunks * (weights + 2 * logits) + rows * (hs + ht) + FORWARD_OUTPUTS * rows * F32
    flops = _logit_flops(rows, sizes.vocab, sizes)
    made = 2 * rows * sizes.vocab
    forward_bytes = logits + vectors
    width = min(vchunk, sizes.vocab)
    backward_bytes = (RECOMPUTE_LOGITS * sizes.rows * width * F32 + sizes.rows * width * sizes.student_itemsize
                      + sizes.rows * sizes.student_hidden * F32 + vectors)
    if backward:
        n, q = sizes.rows, sizes.rows * sizes.vocab * sizes.student_itemsize
        steps = -(-sizes.vocab // width)
        per_step = n * (hs + ht) + 2 * n * sizes.student_hidden * F32 + 3 * n * F32 + (n * hs if weight_grad else 0)
        moved += steps * per_step + weights + sizes.vocab * hs + 2 * 2 * n * sizes.vocab * F32 + 2 * q + n * hs
        flops += _logit_flops(n, sizes.vocab, sizes) + 2 * n * sizes.vocab * sizes.student_hidden
        if weight_grad:
            moved += q + sizes.vocab * hs  # Q read by dw's matmul, dw written
            flops += 2 * n * sizes.vocab * sizes.student_hidden
        if bias_grad:
            moved += q + sizes.vocab * F32
    return RecomputeCost(chunk, flops, moved, max(forward_bytes, backward_bytes if backward else 0), made,
                         STORED_VECTOR_SECONDS, None, forward_bytes, backward_bytes if backward else 0)
