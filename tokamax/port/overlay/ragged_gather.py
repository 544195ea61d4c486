"""Ragged gather of token rows on the SparseCore (upstream has no pure-JAX reference)."""

from ._src.ops.ragged_gather import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.ragged_gather.pallas_mosaic_tpu_kernel import ragged_gather_pallas

__all__ = ["kernel", "ragged_gather_pallas"]
