"""Ring attention over long sequences, in JAX: causal (or windowed, or full) attention of a sequence
sharded over a ring of chips, with a lazy mask (its schedule built in the graph from positions: no
[seq, seq] array, no host work that grows with the sequence) and, optionally, load-balanced
(head-tail: every chip computes the same number of blocks at every step). Upstream's per-call splash
kernels do the work; this package is the ring around them.

- `layout`: where each token sits on the ring (contiguous, head-tail), and the helpers that put a
  sequence into that layout and back.
- `schedule`: one call's block schedule from positions; the busiest chip's blocks per step.
- `steps`: one chip's forward and backward scan (inside a `shard_map`).
- `sharded`: the scan over a mesh: `Layout` (the ring axis, batch and head axes, the mask, the
  layout), `attention` (differentiable), `forward` / `backward` (what the Torch op exports).

    layout = tokamax.ring.Layout(mesh, axis="sp", batch_axis=None, head_axis=None, mqa=False, causal=True,
                                 balanced=True)
    out = tokamax.ring.attention(layout)(q, k, v)   # q, k, v laid out by tokamax.ring.to_ring_layout
"""

from . import layout, schedule, sharded, steps
from .layout import from_ring_layout, to_ring_layout
from .sharded import Layout, attention
from .steps import Plan

__all__ = ["Layout", "Plan", "attention", "from_ring_layout", "layout", "schedule", "sharded", "steps",
           "to_ring_layout"]
