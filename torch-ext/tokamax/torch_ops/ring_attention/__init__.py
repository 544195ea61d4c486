"""Ring attention on Torch tensors: sequence parallel attention across the chips of a torch-tpu job,
each rank holding a shard of the sequence, upstream's ring kernel passing the K/V shards round the
mesh (one splash kernel call per ring step, for the whole batch), forward and backward.

Upstream has no Torch op (nor a public Op) for it; this runs its kernel-level ring call
(`make_ring_attention` in a `jax.shard_map`), as its own ring test does.

- `api`: `ring_attention`, what users call; `ring_attention_ops`, the ops made ahead of torch.compile.
- `custom_ops`: the forward/backward ops per mesh and options (torch-tpu's meshed `jax_op`).
- `sharded`: the JAX functions those ops export, each holding its `shard_map`.
"""

from .api import ring_attention, ring_attention_ops

__all__ = ["ring_attention", "ring_attention_ops"]
