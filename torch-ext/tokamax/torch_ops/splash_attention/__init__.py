"""Splash attention on Torch tensors: upstream's splash kernel at any length, one kernel call for a
whole batch, causal, full or local-window masks as upstream's lazy block-sparse masks (never a dense
[q_len, kv_len] mask), grouped- and multi-query attention, segment ids, a logit soft cap and sinks,
at a mask offset fixed when tracing (autograd through upstream's VJP Op) or read at run time.

The JAX side is `tokamax.splash`; this deliberately runs upstream's kernel-level call (its lazy
masks, its Op's config choice for the blocks) instead of upstream's public call, which turns local
masks into dense constants and takes only lengths its blocks divide.

- `api`: `splash_attention`, what users call.
- `custom_ops`: `splash_op` / `splash_bwd_op` (fixed offset, autograd), `splash_at_op` (run-time offset).
- `cache_op`: `splash_cache_op`, a KV cache step from a padding mask or position ids, its bookkeeping in the
  op's own program (transformers' decode steps).
"""

from .api import splash_attention
from .cache_op import splash_cache_op
from .custom_ops import splash_at_op, splash_bwd_op, splash_op

__all__ = ["splash_at_op", "splash_attention", "splash_bwd_op", "splash_cache_op", "splash_op"]
