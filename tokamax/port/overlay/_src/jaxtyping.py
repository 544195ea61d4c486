"""Upstream's jaxtyping helpers, without run-time shape checking (which needs pydantic)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

ScalarInt = jax.Array | np.generic | jnp.generic | Any


def jaxtyped(fn: Any) -> Any:
    return fn


@contextlib.contextmanager
def disable_jaxtyping(disable: bool = True) -> Iterator[None]:
    yield
