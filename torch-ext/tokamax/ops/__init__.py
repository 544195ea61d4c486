"""Upstream's public ops (`tokamax.ops` upstream): the call a tokamax user makes.

`tokamax.ops.ragged_dot(lhs, rhs, group_sizes, ...)` is upstream's `tokamax.ragged_dot`, run by
upstream's own Op layer (ported at build time, without pydantic, jaxtyping or absl): the
config comes from the caller, else upstream's autotuning table for this chip and these
arguments, else upstream's heuristics, else defaults; `jax.grad` runs upstream's VJP.
The Op classes and their configs are in `ops.tpu` (`ops.tpu.RaggedDot`, ...), experimental
ops in `ops.experimental` (`ops.experimental.splash_attention`, `ops.experimental.tpu`), and
the options (`cross_compile`, ...) in `ops.config`. Names load on first use.
"""

from __future__ import annotations

from ._lazy import namespace

_SRC = "._ported._src"
_NAMES = {
    "dot_product_attention": (f"{_SRC}.ops.attention.api", "dot_product_attention"),
    "DotProductAttentionImplementation": (f"{_SRC}.ops.attention.api", "Implementation"),
    "ragged_dot": (f"{_SRC}.ops.ragged_dot.api", "ragged_dot"),
    "ragged_dot_general": (f"{_SRC}.ops.ragged_dot.api", "ragged_dot_general"),
    # upstream has these two at the top level (tokamax.RaggedDotGroupSizes, ...)
    "RaggedDotGroupSizes": (f"{_SRC}.ops.ragged_dot.base", "GroupSizes"),
    "generate_ragged_dot_group_sizes": (f"{_SRC}.ops.ragged_dot.base", "generate_group_sizes"),
    "config": (f"{_SRC}.config", ""),
    "tpu": (".ops.tpu", ""),
    "experimental": (".ops.experimental", ""),
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = namespace(__name__, _NAMES)
