"""The benchmark's workloads: each op at named model shapes, tokamax beside what a user would run instead.

A `Workload` makes its inputs only when it runs (`make`), so that one at a time holds HBM."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

PASSES = ("fwd", "fwd+bwd")


@dataclasses.dataclass(frozen=True)
class Workload:
    op: str  # "attention", "grouped_matmul", "lm_head_loss", "lm_head_statistics", "distillation"
    case: str  # model and shape
    impl: str  # "tokamax" (what the package picks), "tokamax (...)" a named variant, or the baseline's name
    pass_: str  # "fwd" or "fwd+bwd"
    make: Callable[[], tuple[Callable[..., Any], tuple]]  # -> (fn, args), the args on the chip
    flops: float  # model flops of the pass

    def make_specs(self) -> tuple[Callable[..., Any], tuple]:
        """(fn, the args' shapes and dtypes): what compiling needs, without filling HBM."""
        made: list[Callable[..., Any]] = []

        def args() -> tuple:
            fn, a = self.make()
            made.append(fn)
            return a

        specs = jax.eval_shape(args)
        return made[0], specs


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def normal(seed: int, shape: tuple[int, ...], dtype: Any = jnp.bfloat16, scale: float = 1.0) -> jax.Array:
    """Jitted, so that the float32 draws are not materialized beside the result (128 experts of 2880 x 5760: 8.5 GB
    of them, which ran the chip out of HBM)."""
    return (jax.random.normal(jax.random.key(seed), shape, jnp.float32) * scale).astype(dtype)


def group_sizes(rows: int, groups: int, seed: int = 0, skew: float = 0.0) -> jax.Array:
    """Routed rows per expert as a router spreads them: multinomial over equal probabilities, or (`skew`) over
    probabilities in proportion to exp(skew x N(0, 1)), an uneven router's."""
    r = np.random.default_rng(seed)
    p = np.exp(skew * r.standard_normal(groups)) if skew else np.ones(groups)
    return jnp.asarray(r.multinomial(rows, p / p.sum()), jnp.int32)


def with_grads(loss: Callable[..., jax.Array], argnums: tuple[int, ...]) -> Callable[..., Any]:
    """fwd+bwd: the loss and its gradients in `argnums`."""
    return jax.value_and_grad(loss, argnums=argnums)


def summed(fn: Callable[..., Any]) -> Callable[..., jax.Array]:
    """A scalar loss from an op's first output: its float32 sum (the same cotangent on both sides)."""
    def loss(*args: Any) -> jax.Array:
        out = fn(*args)
        return (out[0] if isinstance(out, tuple) else out).astype(jnp.float32).sum()
    return loss
