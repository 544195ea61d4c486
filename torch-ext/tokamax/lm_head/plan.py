"""Each LM-head kernel's own blocks for one call, chosen by the roofline of its cost model on the chip.

The three kernels want different blocks. The forward and dx re-read the weight once per row block, so
their arithmetic intensity grows with the row block; dw re-reads the hidden states once per
vocabulary block, so its intensity grows with the vocabulary block; every kernel wants blocks at
least as wide as the MXU. `choose` takes, per kernel, the blocks of least roofline time
(`cost.KernelCost.seconds`: MXU time at the blocks' fill, HBM time, a fixed cost per grid step) on the
chip, among those that fit half the chip's VMEM (room for the compiler's own buffers around the
kernel), else among those within the VMEM limit the kernels are compiled with; a hidden size for
which not even the smallest blocks fit that limit is refused before anything is allocated. Of the
blocks within `NEAR` of the fastest (the roofline's own precision), those with vocabulary blocks of at
least `WIDE` win (the MXU's width on every chip, fewer online-softmax rescalings per row), then the
faster, then the larger.

The rows are padded once (a copy of the hidden states) to the forward's row block; the backward
kernels' row blocks divide it (all are powers of two). The vocabulary is never padded: its last block
is read in place and masked (`kernels`), so a block need not divide the vocabulary. Only a
weight of fewer than 128 rows is padded to 128.
"""

from __future__ import annotations

import dataclasses

from . import cost
from .blocks import KERNELS, LANES, ROW_BLOCKS, VOCAB_BLOCKS, Blocks, round_up, vmem_limit

WIDE = 512
NEAR = 1.01


@dataclasses.dataclass(frozen=True)
class Plan:
    """The blocks of each kernel (`blocks.KERNELS`), the rows they run at (padded) and whether they run
    on x.T and w.T (`transposed`: the TPU's own layout of a hidden size off the lanes; `kernels`)."""

    rows: int
    forward: Blocks
    backward_x: Blocks
    backward_w: Blocks
    transposed: bool = False

    def __getitem__(self, kernel: str) -> Blocks:
        if kernel not in KERNELS:
            raise ValueError(f"tokamax lm_head: no kernel {kernel!r}; one of {KERNELS}")
        return getattr(self, kernel)

    def costs(self, hidden: int, vocab: int, itemsize: int, *, soft_cap: bool = False) -> dict[str, cost.KernelCost]:
        """Each kernel's cost at these blocks, by name."""
        return {k: getattr(cost, k)(self.rows, hidden, vocab, itemsize, self[k], soft_cap=soft_cap,
                                    transposed=self.transposed) for k in KERNELS}


def uniform(rows: int, blocks: Blocks, *, transposed: bool = False) -> Plan:
    """One block choice for all three kernels (tests, and the choice before per-kernel blocks)."""
    return Plan(round_up(max(rows, 1), blocks.rows), blocks, blocks, blocks, transposed)


def transposed(hidden: int) -> bool:
    """Whether the kernels run on x.T and w.T: where the hidden size is not a multiple of the lanes, the
    TPU's default layout of a [n, hidden] array is column-major (n a multiple of 128 pads nothing that way),
    and its transpose row-major in place: no copy of x, w, dx or dw around the kernels."""
    return hidden % LANES != 0


def _best(kernel: str, padded_rows: int, hidden: int, vocab: int, itemsize: int, chip: cost.Chip,
          row_blocks: tuple[int, ...], flip: bool) -> Blocks:
    widest = max(LANES, vocab // LANES * LANES)  # no block wider than the weight (but one lane group)
    candidates = [Blocks(r, v) for r in row_blocks for v in VOCAB_BLOCKS if v <= widest]
    for budget in (chip.vmem // 2, vmem_limit(chip.vmem)):
        fitting = [b for b in candidates if b.kernel_vmem_bytes(kernel, hidden, itemsize, transposed=flip) <= budget]
        if fitting:
            seconds = {b: getattr(cost, kernel)(round_up(padded_rows, b.rows), hidden, vocab, itemsize, b,
                                                transposed=flip).seconds(chip)
                       for b in fitting}
            fastest = min(seconds.values())
            near = [b for b in fitting if seconds[b] <= NEAR * fastest]
            return min(near, key=lambda b: (-min(b.vocab, WIDE), seconds[b], -b.rows * b.vocab))
    needs = Blocks(LANES, LANES).kernel_vmem_bytes(kernel, hidden, itemsize, transposed=flip)
    raise ValueError(f"tokamax lm_head: a hidden size of {hidden} needs {needs} bytes of VMEM at the smallest blocks "
                     f"({LANES} rows x {LANES} vocabulary), over the {vmem_limit(chip.vmem)} the kernels may use of "
                     f"this chip's {chip.vmem} (the {kernel} kernel, which holds the whole hidden size per block)")


def choose(rows: int, hidden: int, vocab: int, itemsize: int, chip: cost.Chip) -> Plan:
    """The blocks of each kernel for `rows` x `vocab` at `hidden` (row blocks never above the rows given,
    rounded to the lanes) on `chip`."""
    row_blocks = tuple(r for r in ROW_BLOCKS if r <= round_up(max(rows, 1), LANES)) or (LANES,)
    flip = transposed(hidden)
    forward = _best("forward", rows, hidden, vocab, itemsize, chip, row_blocks, flip)
    padded = round_up(max(rows, 1), forward.rows)
    below = tuple(r for r in row_blocks if r <= forward.rows)
    return Plan(padded, forward, *(_best(k, padded, hidden, vocab, itemsize, chip, below, flip)
                                   for k in ("backward_x", "backward_w")), flip)
