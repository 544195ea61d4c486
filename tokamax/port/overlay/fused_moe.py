"""Experimental fused expert-parallel MoE: `fused_ep_moe_v2` (routing, expert FFN and combine in one kernel)."""

from ._src.ops.experimental.fused_moe import host, kernel, layer, reference
from ._src.ops.experimental.fused_moe.host import WeightFormat
from ._src.ops.experimental.fused_moe.layer import fused_ep_moe_v2

__all__ = ["WeightFormat", "fused_ep_moe_v2", "host", "kernel", "layer", "reference"]
