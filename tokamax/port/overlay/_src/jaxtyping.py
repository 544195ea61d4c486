"""Upstream's jaxtyping helpers without jaxtyping or pydantic: `jaxtyped` checks array annotations
at call time (`_compat.jaxtyping`, which says what is checked), `disable_jaxtyping` turns that off
for a block, as upstream's does."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._compat import jaxtyping as _checker

ScalarInt = jax.Array | np.generic | jnp.generic | Any

jaxtyped = _checker.jaxtyped


@contextlib.contextmanager
def disable_jaxtyping(disable: bool = True) -> Iterator[None]:
    """Within the block, annotations are (`disable=True`) or are not checked."""
    current = _checker.config.jaxtyping_disable
    try:
        _checker.config.update("jaxtyping_disable", disable)
        yield
    finally:
        _checker.config.update("jaxtyping_disable", current)
