"""Grouped low-rank projection with fused reverse rope."""

from ._src.ops.grouped_lowrank_proj import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.grouped_lowrank_proj import reference
from ._src.ops.grouped_lowrank_proj.pallas_mosaic_tpu_kernel import fused_reverse_rope_wo_a_projection, wo_a_projection

__all__ = ["kernel", "reference", "wo_a_projection", "fused_reverse_rope_wo_a_projection"]
