"""Causal conv1d fused with the gated delta rule (GDN, and KDA gating): `fused_conv1d_gdn` over ragged batches."""

from ._src.ops.causal_conv1d_gated_delta_rule import config, reference
from ._src.ops.causal_conv1d_gated_delta_rule import wrapper as kernel
from ._src.ops.causal_conv1d_gated_delta_rule.config import AttentionMode
from ._src.ops.causal_conv1d_gated_delta_rule.wrapper import fused_conv1d_gdn

__all__ = ["AttentionMode", "config", "fused_conv1d_gdn", "kernel", "reference"]
