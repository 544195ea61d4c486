"""What each LM-head kernel costs, from its grid and block specs: the `pl.CostEstimate` every
`pallas_call` in `kernels` declares (XLA's scheduler and `compiled.cost_analysis()` read it), and the
figures a block choice is compared by (arithmetic intensity, the matmuls' shapes, VMEM).

HBM traffic follows the pipeline: an input block is fetched again only when its block index changes
between consecutive grid steps, so a block indexed by the outer grid axis is read once in all, one
indexed by the inner axis once per outer step. The forward and dx run over (row blocks, vocabulary
blocks): x and the per-row vectors once, w and the bias once per row block. dw runs over (vocabulary
blocks, row blocks): w and the bias once, x and the per-row vectors once per vocabulary block. Each
output block is written once. Flops are the matmuls' (2 m n k each): the logits in every kernel, and
G @ w or G.T @ x in the backward. Transcendentals: one exp per logit (e^(z-m) in the forward, p in the
backward), one tanh more per logit under a soft cap, and in the forward one exp per row and
vocabulary block (the running maximum's rescaling) and two logs per row at the end.

Sizes: `rows` the padded rows the kernels run at (a multiple of `blocks.rows`); `vocab` the weight's
rows as stored. The vocabulary axis has ceil(vocab / blocks.vocab) steps; the last block may run past
the weight (read in place, its extra columns masked): its DMA reads only the rows there are, while
the MXU works the whole block, so flops count the padded grid and bytes the arrays as they are. The
bias is padded to the grid (a [1, vocab] float32 copy, not the weight). `transposed` (the kernels on
x.T and w.T: `kernels`) reads and writes the same bytes and does the same flops; only the backward's
second matmul changes shape: dx.T = w.T G.T is (hidden, rows, vocab), dw.T = x.T G (hidden, vocab, rows).

`Chip` (`tokamax.roofline`'s) holds what a block choice is weighed by (peak bf16 flops, HBM bandwidth, MXU width,
VMEM, HBM: libtpu's `get_tpu_info()` figures, calibrated by what the chip measured); `KernelCost.seconds` is
`roofline.seconds` on it: the larger of the MXU time (flops at the MXU's fill) and the HBM time, plus a fixed cost
per grid step.
"""

from __future__ import annotations

import dataclasses

from jax.experimental import pallas as pl

from .. import roofline
from ..roofline import STEP_SECONDS, Chip, chip  # noqa: F401 - the chip figures, shared by every cost model
from .blocks import Blocks

STATISTICS_SECONDS = 13.2e-12
"""Seconds per logit the forward kernel's online statistics take on the v5e beyond its roofline: six running
reductions across each step's [rows, vocab] block (VPU and XLU work after the step's matmul, which it does
not overlap). Measured (benchmarks/measured/v5e-2026-12-04-bench-a9c94e4.json): 66.7 ms at Llama 3 8B's head
and 156.7 at Qwen3 8B's against a roofline of 52.6 and 124.4, 13.3 and 13.0 ps per logit; the backward
kernels (no reduction across the vocabulary) ran within their roofline. Other chips: scaled by their
matmul peak (`roofline.scaled`), the rule the one measured chip cannot yet refute."""
ROW_VECTORS = {"forward": 1, "backward_x": 6, "backward_w": 6}  # targets; + lse and the coefficients a, b, c, d
OUTPUT_VECTORS = 6  # the forward's per-row statistics (kernels.FORWARD_OUTPUTS)
F32 = 4
HBM_SHARE = 8
"""The temporaries of a scheme that holds [rows, vocab] or [vocab, hidden] arrays (the LM head's chunked and stored
schemes, distillation's stored one) may take 1/HBM_SHARE of the chip's HBM (the rest is the model's)."""
@dataclasses.dataclass(frozen=True)
class StoredCost:
    """A stored scheme's cost over a step: XLA's ops over chunks of rows (the LM head's statistics, distillation's
    divergence), so no grid steps; the roofline plus `seconds_per_logit` of vector work over each of its `logits`
    that its matmuls do not hide (measured on the v5e; other chips by `roofline.scaled`). `after`: a phase that
    runs after this one (the LM head's backward after its forward), timed on its own roofline and added."""

    chunk: int
    flops: int
    bytes_accessed: int
    temp_bytes: int
    logits: int = 0
    seconds_per_logit: float = 0.0
    after: StoredCost | None = None

    def seconds(self, on: Chip) -> float:
        """The MXU's time with the vector work after it, or the HBM time where that is longer: XLA's fusions do
        that work as they stream their operands, so a call bound by HBM hides it (the v5e: Gemma 3 4B's stored
        statistics forward, chunks of 256 re-reading the weight, 101.0 ms against an HBM time of 102)."""
        vector = self.logits * roofline.scaled(self.seconds_per_logit, on)
        mine = max(roofline.seconds(self.flops, 0, 0, on, serial=vector),
                   roofline.seconds(0, self.bytes_accessed, 0, on))
        return mine + (self.after.seconds(on) if self.after else 0.0)


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One kernel's cost over its whole grid."""

    kernel: str
    grid: tuple[int, int]
    flops: int
    transcendentals: int
    bytes_read: int
    bytes_written: int
    matmuls: tuple[tuple[int, int, int], ...]  # (m, n, k) of each grid step's matmuls
    vmem_bytes: int  # what it holds in VMEM (blocks.Blocks.kernel_vmem_bytes)
    statistics: int = 0  # logits whose online statistics the kernel keeps (the forward: all of its grid's)

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """Flops per HBM byte: above the chip's flops / bandwidth, the kernel can be MXU-bound."""
        return self.flops / self.bytes_accessed

    def mxu_fill(self, mxu: int) -> float:
        """The share of the MXU's `mxu` x `mxu` tiles the step's matmuls fill (1.0 when every m and n is a
        multiple of it; 128 on v5e, 256 on v6e and v7x)."""
        used = sum(m * n for m, n, _ in self.matmuls)
        tiles = sum(-(-m // mxu) * -(-n // mxu) * mxu * mxu for m, n, _ in self.matmuls)
        return used / tiles

    def seconds(self, on: Chip) -> float:
        """The roofline time on `on`: max(MXU time at this fill, HBM time) + a fixed cost per grid step, + the
        online statistics' time (`STATISTICS_SECONDS`), which the MXU's does not hide."""
        serial = self.statistics * roofline.scaled(STATISTICS_SECONDS, on)
        return roofline.seconds(self.flops, self.bytes_accessed, self.grid[0] * self.grid[1], on, self.mxu_fill(on.mxu),
                                serial=serial)

    def estimate(self) -> pl.CostEstimate:
        return pl.CostEstimate(flops=self.flops, transcendentals=self.transcendentals,
                               bytes_accessed=self.bytes_accessed)


def _check(rows: int, vocab: int, blocks: Blocks) -> tuple[int, int]:
    """(row blocks, vocabulary blocks)."""
    if rows % blocks.rows:
        raise ValueError(f"tokamax lm_head: {rows} rows must be a multiple of the row block ({blocks.rows})")
    return rows // blocks.rows, -(-vocab // blocks.vocab)


def forward(rows: int, hidden: int, vocab: int, itemsize: int, blocks: Blocks, *, soft_cap: bool = False,
            transposed: bool = False) -> KernelCost:
    nr, nv = _check(rows, vocab, blocks)
    logits = rows * nv * blocks.vocab
    read = (rows * hidden * itemsize + ROW_VECTORS["forward"] * rows * 4  # x, targets: once
            + nr * (vocab * hidden * itemsize + nv * blocks.vocab * F32))  # w and the bias: once per row block
    return KernelCost("forward", (nr, nv), 2 * logits * hidden, logits * (1 + soft_cap) + rows * nv + 2 * rows,
                      read, OUTPUT_VECTORS * rows * F32, ((blocks.rows, blocks.vocab, hidden),),
                      blocks.kernel_vmem_bytes("forward", hidden, itemsize, transposed=transposed), statistics=logits)


def backward_x(rows: int, hidden: int, vocab: int, itemsize: int, blocks: Blocks, *, soft_cap: bool = False,
               transposed: bool = False) -> KernelCost:
    nr, nv = _check(rows, vocab, blocks)
    logits = rows * nv * blocks.vocab
    read = (rows * hidden * itemsize + ROW_VECTORS["backward_x"] * rows * 4  # x, the vectors: once
            + nr * (vocab * hidden * itemsize + nv * blocks.vocab * F32))  # w and the bias: once per row block
    return KernelCost("backward_x", (nr, nv), 4 * logits * hidden, logits * (1 + soft_cap), read,
                      rows * hidden * itemsize,
                      ((blocks.rows, blocks.vocab, hidden),
                       (hidden, blocks.rows, blocks.vocab) if transposed else (blocks.rows, hidden, blocks.vocab)),
                      blocks.kernel_vmem_bytes("backward_x", hidden, itemsize, transposed=transposed))


def backward_w(rows: int, hidden: int, vocab: int, itemsize: int, blocks: Blocks, *, soft_cap: bool = False,
               transposed: bool = False) -> KernelCost:
    nr, nv = _check(rows, vocab, blocks)
    logits = rows * nv * blocks.vocab
    read = (vocab * hidden * itemsize + nv * blocks.vocab * F32  # w and the bias: once
            + nv * (rows * hidden * itemsize + ROW_VECTORS["backward_w"] * rows * 4))  # x, vectors: per vocab block
    return KernelCost("backward_w", (nv, nr), 4 * logits * hidden, logits * (1 + soft_cap), read,
                      vocab * hidden * itemsize + vocab * F32,  # dw, db (as stored: the edge block's rows clipped)
                      ((blocks.rows, blocks.vocab, hidden),
                       (hidden, blocks.vocab, blocks.rows) if transposed else (blocks.vocab, hidden, blocks.rows)),
                      blocks.kernel_vmem_bytes("backward_w", hidden, itemsize, transposed=transposed))


def costs(rows: int, hidden: int, vocab: int, itemsize: int, blocks: Blocks, *, soft_cap: bool = False,
          transposed: bool = False) -> dict[str, KernelCost]:
    """The three kernels' costs, by name (`blocks.KERNELS`)."""
    return {f.__name__: f(rows, hidden, vocab, itemsize, blocks, soft_cap=soft_cap, transposed=transposed)
            for f in (forward, backward_x, backward_w)}
