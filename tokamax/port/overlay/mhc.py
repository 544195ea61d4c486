"""mHC (manifold hyper-connections): the pre, post and fused post+pre kernels."""

from ._src.ops.mhc import fused_post_pre_kernel, post_kernel, pre_kernel, reference
from ._src.ops.mhc.fused_post_pre_kernel import mhc_fused_post_pre
from ._src.ops.mhc.post_kernel import mhc_post
from ._src.ops.mhc.pre_kernel import mhc_pre

__all__ = ["fused_post_pre_kernel", "mhc_fused_post_pre", "mhc_post", "mhc_pre", "post_kernel", "pre_kernel",
           "reference"]
