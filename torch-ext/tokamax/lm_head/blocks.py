"""Block sizes of the LM-head kernels and what they hold in VMEM.

Each grid step holds a block of `rows` hidden states and a block of `vocab` weight rows, both over
the whole hidden size (double-buffered by the pipeline), the [rows, vocab] float32 logits and the
few temporaries made from them, and, in the backward kernels, a float32 accumulator of the gradient
block. The rows are padded to a multiple of `rows` (a copy of the hidden states), the vocabulary only
to the lanes (128) and its block divides that, so the weight is never copied where the vocabulary
is a multiple of 128 (every common one: 32000, 128256, 151936, 262144). Blocks shrink until the
largest kernel fits in half the chip's VMEM; a hidden size too large for the smallest blocks is
refused before anything is allocated.
"""

from __future__ import annotations

import dataclasses

LANES = 128
ROW_BLOCKS = (512, 256, 128)
VOCAB_BLOCKS = (1024, 512, 256, 128)
TEMPORARIES = 6  # [rows, vocab] float32 arrays alive at once (logits, z, exp, masks, their products)


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class Blocks:
    rows: int
    vocab: int

    def vmem_bytes(self, hidden: int, itemsize: int) -> int:
        """The most any of the three kernels holds in VMEM (the backward's gradient accumulators)."""
        inputs = 2 * (self.rows + self.vocab) * hidden * itemsize
        logits = TEMPORARIES * self.rows * self.vocab * 4
        accumulator = max(self.rows, self.vocab) * hidden * (4 + 2 * itemsize)
        return inputs + logits + accumulator + 64 * 1024


def choose(rows: int, hidden: int, vocab: int, itemsize: int, vmem_capacity: int) -> Blocks:
    """The largest blocks that fit half of `vmem_capacity` (rows never above the rows given, rounded to
    the lanes; a vocabulary block that divides the vocabulary padded to the lanes)."""
    budget = vmem_capacity // 2
    padded_vocab = round_up(vocab, LANES)
    row_cap = round_up(max(rows, 1), LANES)
    for v in (b for b in VOCAB_BLOCKS if padded_vocab % b == 0):
        for r in (b for b in ROW_BLOCKS if b <= row_cap):
            blocks = Blocks(r, v)
            if blocks.vmem_bytes(hidden, itemsize) <= budget:
                return blocks
    smallest = Blocks(LANES, LANES)
    raise ValueError(f"tokamax lm_head: a hidden size of {hidden} needs {smallest.vmem_bytes(hidden, itemsize)} bytes "
                     f"of VMEM at the smallest blocks ({LANES} rows x {LANES} vocabulary), over half of this chip's "
                     f"{vmem_capacity}; the kernels hold the whole hidden size per block")
