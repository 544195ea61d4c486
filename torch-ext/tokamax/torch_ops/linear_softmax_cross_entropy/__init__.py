"""Linear softmax cross-entropy loss on Torch tensors through upstream's public op
(`ops.linear_softmax_cross_entropy_loss`, the Mosaic kernels): `loss = reduce(lse(x @ w) - (x @ w)[label])`
without materialising the logits, and the log-sum-exp per row; autograd in x and w through upstream's VJP;
any size and ignored labels (padding around the kernel call, `tokamax.lm_loss`).

- `api`: `linear_softmax_cross_entropy_loss`, what users call.
- `custom_ops`: the public op's pair, and the per-row pair on the padded problem.
"""

from .api import linear_softmax_cross_entropy_loss
from .custom_ops import (
    linear_softmax_cross_entropy_loss_bwd_op,
    linear_softmax_cross_entropy_loss_op,
    linear_softmax_cross_entropy_rows_bwd_op,
    linear_softmax_cross_entropy_rows_op,
)

__all__ = ["linear_softmax_cross_entropy_loss", "linear_softmax_cross_entropy_loss_bwd_op",
           "linear_softmax_cross_entropy_loss_op", "linear_softmax_cross_entropy_rows_bwd_op",
           "linear_softmax_cross_entropy_rows_op"]
