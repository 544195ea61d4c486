"""Probe (JAX tier): the LM head's cost model (`tokamax.lm_head.cost`) for one training step's head at
16,384 tokens, hidden 4096, bf16, Qwen's and Llama's vocabularies, on v5e, v6e and v7x: per kernel the
blocks, HBM bytes, arithmetic intensity against the chip's ridge point, MXU fill and roofline time,
before and after per-kernel blocks (issue 44) side by side; and the labels path's training loss
(`lm_head.fused`): which scheme the chip gets, and the roofline of Liger's chunked one (three matmuls:
each chunk's logits kept in HBM, dW accumulated there in float32).

"Before" is the rule the kernels had until issue 44, kept here as the baseline: one block choice for
all three kernels, a vocabulary block dividing the vocabulary padded to 128 (so the weight padded to
it), rows 512/256/128 and vocabulary 1024..128, the largest fitting half the VMEM.

    python lm_head_costs.py VARIANT_DIR
Prints JSON.
"""

import json
import sys
from pathlib import Path

import kernels

ROWS, HIDDEN, ITEMSIZE = 16384, 4096, 2
VOCABS = {"Qwen3 (151,936)": 151936, "Llama 3 (128,256)": 128256}
CHIPS = ("v5e", "v6e", "v7x")


def before(lm_head, chip, vocab: int) -> tuple:  # noqa: ANN001
    """The plan the kernels ran at before per-kernel blocks."""
    blocks_mod = lm_head.blocks
    padded_vocab = blocks_mod.round_up(vocab, 128)
    candidates = [blocks_mod.Blocks(r, v) for v in (1024, 512, 256, 128) if padded_vocab % v == 0
                  for r in (512, 256, 128)]
    for budget in (chip.vmem // 2, blocks_mod.vmem_limit(chip.vmem)):
        for b in candidates:
            if max(b.kernel_vmem_bytes(k, HIDDEN, ITEMSIZE) for k in blocks_mod.KERNELS) <= budget:
                return lm_head.plan.uniform(ROWS, b), padded_vocab
    raise AssertionError("no blocks fit")


def fused(lm_head, chip, vocab: int) -> dict:  # noqa: ANN001
    """The labels path's training loss (`lm_head.fused`): the chunk `choose` picks on the chip (None: the
    kernels), and the chunked scheme's roofline at that chunk, or at the smallest if none is picked."""
    chunk = lm_head.fused.choose(ROWS, HIDDEN, vocab, ITEMSIZE, chip)
    c = lm_head.fused.cost(ROWS, HIDDEN, vocab, ITEMSIZE, chunk or lm_head.fused.CHUNKS[-1])
    return {"chunk": chunk, "at": c.chunk, "flops": c.flops, "bytes": c.bytes_accessed, "seconds": c.seconds(chip),
            "temp_bytes": c.temp_bytes, "hbm_share": chip.hbm // lm_head.fused.HBM_SHARE, "matmuls": 3}


def row(plan, vocab: int, chip) -> dict:  # noqa: ANN001
    costs = plan.costs(HIDDEN, vocab, ITEMSIZE)
    return {name: {"blocks": [plan[name].rows, plan[name].vocab], "bytes": c.bytes_accessed,
                   "intensity": c.arithmetic_intensity, "fill": c.mxu_fill(chip.mxu), "seconds": c.seconds(chip),
                   "flops": c.flops} for name, c in costs.items()}


def main() -> int:
    tokamax = kernels.get_local_kernel(Path(sys.argv[1]))
    lm_head = tokamax.lm_head
    out = {"rows": ROWS, "hidden": HIDDEN, "chips": {}, "vocabs": {}}
    for chip_name in CHIPS:
        with tokamax.emulation.emulated_chip(chip_name):
            chip = lm_head.cost.chip()
        out["chips"][chip_name] = {"ridge": chip.ridge, "mxu": chip.mxu, "peak_flops": chip.peak_flops,
                                   "hbm_bandwidth": chip.hbm_bandwidth}
        for label, vocab in VOCABS.items():
            old, padded_vocab = before(lm_head, chip, vocab)
            new = lm_head.plan.choose(ROWS, HIDDEN, vocab, ITEMSIZE, chip)
            out["vocabs"].setdefault(label, {})[chip_name] = {
                "before": row(old, padded_vocab, chip), "after": row(new, vocab, chip),
                "fused": fused(lm_head, chip, vocab)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
