"""Upstream's public ops as JAX users shard them (`jax.shard_map`, MaxText style): values on 8 host
CPU devices against the whole call, and the TPU lowering on a multi-chip mesh against upstream's."""
