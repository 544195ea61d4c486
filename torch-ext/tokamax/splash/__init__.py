"""Upstream's splash attention kernel for real workloads, in JAX: any length, the whole batch in one
kernel call, causal and sliding-window masks as upstream's lazy block-sparse masks, at an offset known
when tracing or only at run time (a KV cache's fill level).

What the Torch op `torch_ops.splash_attention` and the transformers attention run. Deliberately not
upstream's public call, which turns every mask but causal into a dense [q_len, kv_len] constant and
takes only lengths its blocks divide; the kernel, its blocks (upstream's Op's config choice) and its
backward pass are upstream's own.

- `lengths`: the lengths the kernel runs at (padding) and the export buckets of a cache step's
  keys and queries.
- `masks`: a call's mask (causal, full or a local window) as upstream's lazy mask objects, and the
  block schedule of a mask at a run-time offset.
- `padding`: padding a call to the kernel's lengths, segment ids that mask the padding.
- `schedule`: the block schedule (upstream's `MaskInfo`) at a fixed offset, from the blocks' positions
  (no O(q_len x kv_len) host work), and the SMEM bound every call is checked against.
- `fixed_offset`: `attend` / `attend_vjp`: upstream's kernel and backward; `attend` differentiable
  (`jax.grad`: its backward is `attend_vjp`).
- `run_time_offset`: `attend_at` (forward only) and `kv_slots_read`, the KV slots a call reads.
- `blocks`: each kernel's blocks: upstream's config choice where it fits the chip's scoped VMEM, else the fitting
  blocks `cost` times least (head dim 256's backward on every chip; a caller's blocks checked).
- `cost`: what the forward and backward kernels cost at these blocks (`tokamax.roofline`), measured on the v5e.
"""

from . import blocks, cost
from .blocks import Blocks
from .fixed_offset import attend, attend_vjp
from .lengths import bucket, padded, query_bucket
from .masks import MaskSpec
from .run_time_offset import attend_at, kv_slots_read

__all__ = ["Blocks", "MaskSpec", "blocks", "cost",
           "attend", "attend_at", "attend_vjp", "bucket", "kv_slots_read", "padded", "query_bucket"]
