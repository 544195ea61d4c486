"""Block sizes of the LM-head kernels and what they hold in VMEM, as the TPU compiler allocates it.

Each grid step holds a block of `rows` hidden states and a block of `vocab` weight rows, both over
the whole hidden size and double-buffered by the pipeline; the backward kernels also hold their
double-buffered output block (dx [rows, hidden], dw [vocab, hidden]) and its float32 accumulator.
The compiler also spills the operand block the second matmul reads whole (x in the forward and in
dw's G.T @ x, w in dx's G @ w) and a few [rows, vocab] float32 temporaries. `vmem_bytes` is that sum;
it was checked against libtpu's own figures ("Program vmem requirement", spill slots included) on
v5e, v6e and v7x (tests/tpu_compile/ and tools/tpu_compile/cases/lm_head.py hold the boundary).

On x.T and w.T (`kernels`' transposed variant) libtpu allocates up to ~10 MiB more in the backward
kernels at wide blocks (v7x, hidden 8192: dx 161.6 MiB at 1024 x 1024 against 154 modelled row-major,
dw 164.2 against 154), a few [rows, vocab] float32 temporaries more (the gradient block transposed
for the second matmul), and less at narrow ones (no spill of the operand read whole: 64.1 MiB against
72.0 at 128 x 128 and hidden 32768). `TRANSPOSED_TEMPORARIES` more of them cover every figure measured;
at the smallest blocks the estimate is then ~13% above libtpu's, so the largest hidden size off the
lanes is refused a little early.

Each kernel gets its own blocks for a call (`plan`), from `ROW_BLOCKS` x `VOCAB_BLOCKS`; the
vocabulary's last block may run past the weight's rows (read in place, its extra columns masked), so a
vocabulary block need not divide the vocabulary.
"""

from __future__ import annotations

import dataclasses

LANES = 128
ROW_BLOCKS = (1024, 512, 256, 128)
VOCAB_BLOCKS = (2048, 1024, 512, 256, 128)
KERNELS = ("forward", "backward_x", "backward_w")
TEMPORARIES = 2  # [rows, vocab] float32 spill slots (libtpu: ~1.2 of them at 512 x 1024, 1.3 at 128 x 512)
RESERVE_PER_ROW = 2048  # the per-row vectors' windows and other small spills (libtpu: 1.1 MiB at 512 rows)
TRANSPOSED_TEMPORARIES = 4  # [rows, vocab] float32, more in the backward kernels on x.T and w.T
VMEM_LIMIT_FRACTION = 0.9  # of the chip's VMEM, the scoped limit the kernels are compiled with


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def vmem_limit(vmem_capacity: int) -> int:
    """The `vmem_limit_bytes` every LM-head kernel is compiled with, and the most `plan` lets one hold."""
    return int(VMEM_LIMIT_FRACTION * vmem_capacity)


@dataclasses.dataclass(frozen=True)
class Blocks:
    rows: int
    vocab: int
    compute: int = 0
    """Vocabulary columns of one iteration of the kernel's inner loop (`kernels.COMPUTE`, its default where 0);
    `vocab` for the whole block at once."""

    def kernel_vmem_bytes(self, kernel: str, hidden: int, itemsize: int, *, transposed: bool = False) -> int:
        """What `kernel` (one of `KERNELS`) holds in VMEM at these blocks (`transposed`: on x.T and w.T)."""
        r, v, h, s = self.rows, self.vocab, hidden, itemsize
        held = 2 * (r + v) * h * s + TEMPORARIES * r * v * 4 + RESERVE_PER_ROW * r  # x and w blocks, double-buffered
        if transposed and kernel != "forward":
            held += TRANSPOSED_TEMPORARIES * r * v * 4
        if kernel == "forward":
            return held + r * h * s  # x's block read whole by the matmul
        if kernel == "backward_x":
            return held + 2 * r * h * s + 4 * r * h + v * h * s  # dx's block, its accumulator, w read whole
        if kernel == "backward_w":
            return held + 2 * v * h * s + 4 * v * h + r * h * s  # dw's block, its accumulator, x read whole
        raise ValueError(f"tokamax lm_head: no kernel {kernel!r}; one of {KERNELS}")

