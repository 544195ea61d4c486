"""How splash's backward adds its dq partials (port.kdl routes `_splash_attention_bwd`'s sum here).

Upstream adds them by `sum(axis=0)`, which JAX emits as a float32 reduce and a separate rounding to bf16. JAX's
compile folds the two into one pass; torch-tpu's compile of the same export does not, and writes the float32 sum
to HBM and reads it back (the v5e's trace at 8k tokens, 32 heads: 505 + 298 us against JAX's 409). Added element
by element in float32 (at most 4 partials: the dynamic grid's 3, or a few kv steps), the sum and its rounding are
one fusion in either compile; the arithmetic is the same float32 sum, rounded once.

`as_released()` restores upstream's sum within a block: what the identity checks against upstream 0.0.17 compare
under.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp

_RELEASED = contextvars.ContextVar("tokamax_splash_dq_sum_as_released", default=False)
ELEMENTWISE_UP_TO = 4


@contextlib.contextmanager
def as_released() -> Iterator[None]:
    """Within the block, upstream's `sum(axis=0)`."""
    reset = _RELEASED.set(True)
    try:
        yield
    finally:
        _RELEASED.reset(reset)


def add(partials: jax.Array) -> jax.Array:
    """The partials [n, ...] added over their first axis (float32 where added element by element; the caller
    rounds to dq's dtype)."""
    if _RELEASED.get() or partials.shape[0] > ELEMENTWISE_UP_TO:
        return partials.sum(axis=0)
    return functools.reduce(jnp.add, [p.astype(jnp.float32) for p in partials])
