"""A row's softmax in plain XLA, as the schemes that run XLA over chunks of rows take it (the LM head's and
distillation's stored schemes): from float32 logits shifted by their maximum, so that z - lse never adds the
maximum's rounding to every element."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def log_softmax(z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log p [rows, vocab], the log-sum-exp [rows], the entropy [rows]) of float32 logits z [rows, vocab]; the
    entropy as the kernels take it, log s - sum p (z - max), s = sum e^(z - max)."""
    top = jnp.max(z, axis=1, keepdims=True)
    shifted = z - top
    log_s = jnp.log(jnp.sum(jnp.exp(shifted), axis=1, keepdims=True))
    log_p = shifted - log_s
    return log_p, (top + log_s)[:, 0], log_s[:, 0] - jnp.sum(jnp.exp(log_p) * shifted, axis=1)
