"""Projection that saves its state into the CSA cache."""

from ._src.ops.proj_and_save_state import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.proj_and_save_state import reference
from ._src.ops.proj_and_save_state.pallas_mosaic_tpu_kernel import proj_and_save_state

__all__ = ["kernel", "reference", "proj_and_save_state"]
