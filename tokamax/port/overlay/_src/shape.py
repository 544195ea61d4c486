"""Shape helpers of upstream's `_src/shape.py` that the ported Op layer uses (upstream's module
also needs einshape)."""

from __future__ import annotations

from typing import Any

import jax
from jax import export

SymbolicDim = type(export.symbolic_shape("a")[0])


def contains_symbolic_shape(args: Any) -> bool:
    """Whether any leaf of `args` has a symbolic (jax.export) dimension."""
    for x in jax.tree.leaves(args):
        if hasattr(x, "shape") and isinstance(x.shape, tuple):
            if any(isinstance(s, SymbolicDim) for s in x.shape):
                return True
    return False
