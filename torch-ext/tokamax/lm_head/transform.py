"""The elementwise map from an LM head's raw logits l = x @ w.T + b to the logits z a softmax is taken
of, as models and trainers apply it: z = post * tanh(pre * l) with a soft cap, z = pre * post * l
without one. One form covers a final logit soft cap c (Gemma 2: pre 1/c, post c), a logit scale s
(Cohere's logit_scale, Granite's 1/logits_scaling: the raw logits times s) and a sampling temperature
T (post divided by T), in any combination."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class LogitTransform:
    """z = post * tanh(pre * l) if `tanh`, else z = pre * post * l (hashable: a static argument)."""

    pre: float = 1.0
    tanh: bool = False
    post: float = 1.0

    @classmethod
    def of(cls, *, scale: float = 1.0, soft_cap: float | None = None, temperature: float = 1.0) -> LogitTransform:
        """TRL's order: the raw logits times `scale`, then `soft_cap * tanh(. / soft_cap)`, then / temperature."""
        if not temperature or temperature < 0:
            raise ValueError(f"tokamax lm_head: temperature must be > 0, got {temperature}")
        if soft_cap is None:
            return cls(pre=float(scale), post=1.0 / float(temperature))
        if soft_cap <= 0:
            raise ValueError(f"tokamax lm_head: soft_cap must be > 0 or None, got {soft_cap}")
        return cls(pre=float(scale) / float(soft_cap), tanh=True, post=float(soft_cap) / float(temperature))

    @property
    def identity(self) -> bool:
        return not self.tanh and self.pre * self.post == 1.0

    def __call__(self, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(z, dz/dl) of float32 raw logits."""
        if not self.tanh:
            scale = self.pre * self.post
            return logits * scale, jnp.full_like(logits, scale)
        t = jnp.tanh(logits * self.pre)
        return t * self.post, (1.0 - t * t) * (self.pre * self.post)


IDENTITY = LogitTransform()
"""The raw logits as they are."""
