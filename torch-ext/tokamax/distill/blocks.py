"""Block sizes of the distillation kernels and what they hold in VMEM.

Each grid step holds a block of `rows` hidden states and a block of `vocab` weight rows of both models
(each over its own whole hidden size), double-buffered by the pipeline, a few [rows, vocab] float32
temporaries (both models' logits, their exponentials and the divergence's terms), and the per-row
vectors' windows. The forward also spills the hidden-state blocks its matmuls read whole; the backward
kernels hold their double-buffered output block (the student's dx [rows, hidden_s] or dw [vocab,
hidden_s]), its float32 accumulator and the operand the second matmul reads whole (the LM head's
figures, `lm_head.blocks`, with the teacher's blocks added).

The vocabulary is never padded: its last block overhangs the weight and its columns are masked, so
neither model's weight is copied whatever the vocabulary (151,936 = 1187 x 128 takes blocks of 1024:
148 full ones and one of 384 columns). Rows overhang their last block the same way. Each kernel has
blocks of its own: the forward and dx re-read both weights once per row block, so `choose` gives them
the most rows (with vocabulary blocks of 512 or more) that fit half the chip's VMEM; dw re-reads the
hidden states once per vocabulary block, so it gets the widest vocabulary block first; then any within
the VMEM limit the kernels are compiled with (`lm_head.blocks.vmem_limit`). Sizes for which not even
the smallest blocks fit are refused before anything is allocated.
"""

from __future__ import annotations

import dataclasses

from ..lm_head.blocks import LANES, round_up, vmem_limit

ROW_BLOCKS = (512, 256, 128)
VOCAB_BLOCKS = (2048, 1024, 512, 256, 128)
KERNELS = ("forward", "backward_x", "backward_w")
TEMPORARIES = 5  # [rows, vocab] float32: both models' logits, their exponentials, one product
RESERVE_PER_ROW = 4096  # the per-row vectors' windows and scratch (twice the LM head's: two models)
WIDE_VOCAB = 512  # the narrowest vocabulary block the row-major kernels prefer


@dataclasses.dataclass(frozen=True)
class Sizes:
    """A call's sizes: rows, each model's hidden size and itemsize, the vocabulary."""

    rows: int
    student_hidden: int
    teacher_hidden: int
    vocab: int
    student_itemsize: int = 2
    teacher_itemsize: int = 2


@dataclasses.dataclass(frozen=True)
class Blocks:
    rows: int
    vocab: int

    def kernel_vmem_bytes(self, kernel: str, sizes: Sizes) -> int:
        """What `kernel` (one of `KERNELS`) holds in VMEM at these blocks."""
        r, v = self.rows, self.vocab
        hs, ss, ht, st = sizes.student_hidden, sizes.student_itemsize, sizes.teacher_hidden, sizes.teacher_itemsize
        held = 2 * (r + v) * (hs * ss + ht * st) + TEMPORARIES * r * v * 4 + RESERVE_PER_ROW * r
        if kernel == "forward":
            return held + r * (hs * ss + ht * st)  # both hidden-state blocks read whole by the matmuls
        if kernel == "backward_x":
            return held + 2 * r * hs * ss + 4 * r * hs + v * hs * ss + r * ht * st  # dx, its accumulator, w_s whole
        if kernel == "backward_w":
            return held + 2 * v * hs * ss + 4 * v * hs + r * (hs * ss + ht * st)  # dw, its accumulator, x whole
        raise ValueError(f"tokamax distill: no kernel {kernel!r}; one of {KERNELS}")

    def vmem_bytes(self, sizes: Sizes) -> int:
        """The most any of the three kernels holds in VMEM."""
        return max(self.kernel_vmem_bytes(k, sizes) for k in KERNELS)

    def grid(self, sizes: Sizes) -> tuple[int, int]:
        """(row blocks, vocabulary blocks), the last of each possibly overhanging."""
        return -(-sizes.rows // self.rows), -(-sizes.vocab // self.vocab)


ROW_MAJOR = ("forward", "backward_x")  # the weights re-read once per row block: the most rows first


def _candidates(sizes: Sizes, kernel: str | None) -> list[list[Blocks]]:
    """The blocks in the order `choose` tries them, in two groups: vocabulary blocks of at least 512 (or
    the vocabulary's own width, if narrower), then the narrower ones. Within a group, for the forward and
    dx (whose grid re-reads both weights once per row block) the most rows first; for dw (which re-reads
    the hidden states once per vocabulary block) and all three at once, the widest vocabulary block first."""
    row_cap, vocab_cap = round_up(max(sizes.rows, 1), LANES), round_up(max(sizes.vocab, 1), LANES)
    rows = [r for r in ROW_BLOCKS if r <= row_cap] or [LANES]
    vocabs = [v for v in VOCAB_BLOCKS if v <= vocab_cap] or [LANES]
    if kernel in ROW_MAJOR:
        ordered = [Blocks(r, v) for r in rows for v in vocabs]
    else:
        ordered = [Blocks(r, v) for v in vocabs for r in rows]
    wide = [b for b in ordered if b.vocab >= min(WIDE_VOCAB, vocabs[0])]
    return [wide, [b for b in ordered if b not in wide]]


def choose(sizes: Sizes, vmem_capacity: int, kernel: str | None = None) -> Blocks:
    """The blocks of `kernel` (one of `KERNELS`; None: blocks all three fit): group by group of
    `_candidates`, the first that fits half of `vmem_capacity`, else the first within `vmem_limit` (rows
    never above the rows given rounded to the lanes, nor the vocabulary block above the vocabulary rounded
    to them)."""
    def held(blocks: Blocks) -> int:
        return blocks.vmem_bytes(sizes) if kernel is None else blocks.kernel_vmem_bytes(kernel, sizes)

    smallest = Blocks(LANES, LANES)
    if smallest.vmem_bytes(sizes) <= vmem_limit(vmem_capacity):  # every kernel takes these sizes, or none does
        for group in _candidates(sizes, kernel):
            for budget in (vmem_capacity // 2, vmem_limit(vmem_capacity)):
                for blocks in group:
                    if held(blocks) <= budget:
                        return blocks
    raise ValueError(f"tokamax distill: hidden sizes of {sizes.student_hidden} (student) and {sizes.teacher_hidden} "
                     f"(teacher) need {smallest.vmem_bytes(sizes)} bytes of VMEM at the smallest blocks ({LANES} rows "
                     f"x {LANES} vocabulary), over the {vmem_limit(vmem_capacity)} the kernels may use of this chip's "
                     f"{vmem_capacity}; the kernels hold both whole hidden sizes per block")
