"""CSA cache gather."""

from ._src.ops.csa_gather import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.csa_gather import reference
from ._src.ops.csa_gather.pallas_mosaic_tpu_kernel import csa_gather

__all__ = ["kernel", "reference", "csa_gather"]
