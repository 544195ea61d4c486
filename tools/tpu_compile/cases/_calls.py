"""Helpers the op families' cases share: a loss whose gradient runs the forward kernel too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def grad_of_square(fn: Callable[..., Any], argnums: int | tuple[int, ...]) -> Callable[..., Any]:
    """Gradients of sum(fn(...)^2) in f32: the loss uses the output's values, so XLA keeps the forward."""
    return jax.grad(lambda *args: jnp.sum(jnp.square(fn(*args).astype(jnp.float32))), argnums=argnums)
