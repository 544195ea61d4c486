"""MoE experts' grouped matmul on chips before TPU7x: the tiles each call gets where upstream's tables have no
entry (`tiles`): what the chip measured at that shape (`measured`, shipped result files), else a rule fitted to its
scoped VMEM and checked on the chip (tools/chip/sweep.py)."""

from . import measured, tiles

__all__ = ["measured", "tiles"]
