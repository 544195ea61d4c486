"""Linear projection fused with softmax cross-entropy: the forward (loss, lse) and backward (dx, dw) kernels."""

from ._src.ops.linear_softmax_cross_entropy_loss import pallas_mosaic_tpu_kernel as kernel
from ._src.ops.linear_softmax_cross_entropy_loss import reference
from ._src.ops.linear_softmax_cross_entropy_loss.pallas_mosaic_tpu_kernel import (
    linear_softmax_cross_entropy_loss_bwd_pallas_mosaic_tpu,
    linear_softmax_cross_entropy_loss_fwd_pallas_mosaic_tpu,
)

__all__ = ["kernel", "linear_softmax_cross_entropy_loss_bwd_pallas_mosaic_tpu",
           "linear_softmax_cross_entropy_loss_fwd_pallas_mosaic_tpu", "reference"]
