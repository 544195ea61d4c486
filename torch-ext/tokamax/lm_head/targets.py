"""Targets outside the vocabulary. The kernels compare each row's target with their columns, so a target
in no column (negative, or >= vocab) gives its row a target logit of 0, a log-probability of -lse and a
meaningless top-1, without any error. The public calls refuse such targets where reading them costs
nothing (values on the host: numpy arrays, JAX arrays on CPU), and elsewhere (traced values, arrays on
a TPU, where a check would wait for the device) make every statistic of those rows NaN, so that a step
built on them is visibly wrong instead of silently so; those rows add nothing to the gradients (as
where a loss masks them), and their NaN never reaches another row's. The Torch op refuses CPU tensors
with the cross-entropy's check (`torch_ops.linear_softmax_cross_entropy.labels`, this message) and
gets the NaN rows from here."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["dropped", "host_values", "message", "nan_rows", "outside", "refuse"]


def message(op: str, name: str, vocab: int, ignore_index: int | None, count: int, values: list[int]) -> str:
    """The refusal's text, for this module and the Torch ops alike."""
    allowed = f"in [0, {vocab})"
    if ignore_index is not None:
        allowed += f" or equal to ignore_index ({ignore_index})"
    return f"tokamax {op}: {name} must be {allowed}; got {count} outside, e.g. {values}"


def host_values(targets: Any) -> np.ndarray | None:
    """`targets` as numpy where reading them waits for nothing (not traced, on the host), else None."""
    if isinstance(targets, jax.core.Tracer):
        return None
    if isinstance(targets, jax.Array):
        if not targets.is_fully_addressable or any(d.platform != "cpu" for d in targets.devices()):
            return None
    return np.asarray(targets)


def refuse(op: str, targets: Any, vocab: int) -> None:
    """Raise ValueError, naming the values, if `targets` are on the host and any is outside [0, vocab)."""
    values = host_values(targets)
    if values is None:
        return
    bad = values[(values < 0) | (values >= vocab)]
    if bad.size:
        raise ValueError(message(op, "targets", vocab, None, int(bad.size), sorted({int(v) for v in bad[:8]})))


def outside(targets: jax.Array, vocab: int) -> jax.Array:
    """bool [rows]: the targets in no column."""
    return (targets < 0) | (targets >= vocab)


def nan_rows(stats: list[jax.Array], targets: jax.Array, vocab: int) -> list[jax.Array]:
    """Each [rows] statistic with the rows of out-of-range targets NaN."""
    bad = outside(targets, vocab)
    return [jnp.where(bad, jnp.nan, s) for s in stats]


def dropped(lse: jax.Array, coefficients: tuple[jax.Array, ...], targets: jax.Array, vocab: int
            ) -> tuple[jax.Array, list[jax.Array]]:
    """The backward's lse and per-row coefficients with the rows of out-of-range targets left out (lse +inf:
    p = 0; coefficients 0), so that their NaN statistics never reach the gradients (0 * NaN is NaN)."""
    bad = outside(targets, vocab)
    return jnp.where(bad, jnp.inf, lse), [jnp.where(bad, 0.0, c) for c in coefficients]
