"""Ring attention on Torch tensors: sequence parallel attention across the chips of a torch-tpu job,
each rank holding a shard of the sequence, the K/V shards passed round the mesh with their positions
(upstream's splash kernels for each ring step, one call per contiguous KV run, for the whole batch),
forward and backward; a lazy causal (or windowed, or full) mask, and optionally the load-balanced
head-tail layout.

Upstream has no Torch op (nor a public Op) for it, and its ring takes only a dense mask; this runs
`tokamax.ring` (our scan over upstream's per-call kernels) in a `jax.shard_map`.

- `api`: `ring_attention`, what users call; `ring_attention_ops`, the ops made ahead of torch.compile;
  `to_ring_layout` / `from_ring_layout`, a sequence into the ring's layout and back; `mesh_coordinate`,
  which shard along a mesh axis a rank passes.
- `custom_ops`: the forward/backward ops per mesh and options (torch-tpu's meshed `jax_op`).
- the JAX functions those ops export: `tokamax.ring.sharded`.
"""

from .api import from_ring_layout, mesh_coordinate, ring_attention, ring_attention_ops, to_ring_layout

__all__ = ["from_ring_layout", "mesh_coordinate", "ring_attention", "ring_attention_ops", "to_ring_layout"]
