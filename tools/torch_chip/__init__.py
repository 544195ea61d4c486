"""The chip tier's Torch mode: the Torch ops, transformers and TRL on torch-tpu tensors on a TPU host.

torch-tpu owns the chip in a Torch process (JAX there runs on its CPU and exports for torch-tpu), so each
figure that compares the Torch path with the JAX path comes from two processes of one command: the JAX side
(`python3 -m tools.torch_chip jax`) first, then the Torch side, which reads the JAX side's file and writes
both into one record. Set the host up first (`host.sh`, from a package `pack.py` made here):

    python3 -m tools.torch_chip.pack                       # here: build/torch-chip/torch_tpu.tar.xz
    source tools/torch_chip/host.sh                         # there: torch, torch-tpu, the libtpu shim
    python3 -m tools.torch_chip ops --out $OUT/ops          # every op family: numerics, then the bridge's cost
    python3 -m tools.torch_chip steps --out $OUT/steps      # transformers' training steps
    python3 -m tools.torch_chip trl --out $OUT/trl          # TRL's trainers

Every record says what ran and what could not, and why (`error`); nothing is skipped silently.
"""
