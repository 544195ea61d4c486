"""Fused MoE for decode (upstream has no pure-JAX reference)."""

from ._src.ops.experimental.fused_moe_decode import fused_moe_decode_kernel as kernel
from ._src.ops.experimental.fused_moe_decode.fused_moe_decode_kernel import fused_moe_decode

__all__ = ["kernel", "fused_moe_decode"]
