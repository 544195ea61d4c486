"""MoE experts' grouped matmul on chips before TPU7x: the tiles each call gets where upstream's tables have no
entry (`tiles`), measured on the chip (tools/chip/sweep.py) and fitted to its scoped VMEM."""

from . import tiles

__all__ = ["tiles"]
