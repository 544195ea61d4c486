"""Ragged gather with a weighted reduction, for MoE combine."""

from ._src.ops.ragged_gather_reduce import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.ragged_gather_reduce import reference
from ._src.ops.ragged_gather_reduce.pallas_mosaic_tpu_kernel import ragged_gather_reduce

__all__ = ["kernel", "reference", "ragged_gather_reduce"]
