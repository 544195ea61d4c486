"""Router top-k: per-row top-k selection for MoE routing."""

from ._src.ops.router_topk import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.router_topk import reference
from ._src.ops.router_topk.pallas_mosaic_tpu_kernel import select

__all__ = ["kernel", "reference", "select"]
