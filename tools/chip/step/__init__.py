"""The whole training step on the chip: decoder layers and their LM head, forward and backward over every weight,
with the package's ops (`tokamax.splash.attend`, `tokamax.ops.ragged_dot`, `tokamax.lm_head.loss`) against the
best a JAX user has (JAX's bundled splash at MaxText's blocks, `jax.lax.ragged_dot`, XLA's head with its logits
materialized), the layers themselves the same plain JAX on both sides.

- `models`: the steps benchmarked (a dense model, a MoE with real top-k routing and imbalanced groups, Gemma 3's
  sliding-window pattern at head dim 256), their layers and tokens, and the model flops a step does.
- `decoder`: the decoder in plain JAX (RMSNorm, RoPE, grouped-query attention, SwiGLU / GeGLU, a routed MoE),
  its weights, and the step's loss with the ops it is handed (`Ops`).
- `ops`: the two sets of ops.
"""
