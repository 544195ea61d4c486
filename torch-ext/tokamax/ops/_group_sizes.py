"""The ragged dot's operands and group sizes, checked before upstream's op runs (`tokamax.ops.ragged_dot`,
`ragged_dot_general`; the Torch ops go through them too).

Upstream checks none of this: 3 sizes for 4 experts ran (jax.lax.ragged_dot refuses), sizes summing past the
rows failed deep in the interpreter ("Out-of-bounds read ... smem"; on a chip, a silent read out of bounds),
negative sizes ran, a 3-D lhs failed on "too many values to unpack" in the tile hook.

- Always (shapes are static): the ranks, group_sizes' dtype (integer) and its count against rhs's groups.
- Where the values are known (a concrete array: eager JAX, outside `jit`): negative sizes and sizes summing past
  the rows are refused.
- Under `jit` (traced sizes): a device-side guard on the [groups] vector alone. Sizes are clipped (negatives to
  0, the running sum to the rows), so the kernel never reads or writes out of bounds and nothing comes back NaN,
  and bad sizes are flagged with `jax.experimental.checkify.debug_check`: under `checkify.checkify(f)` the call
  returns the error naming the op and the sizes; elsewhere the check compiles to nothing. A flag that logs from the
  chip (a `jax.debug.callback` behind a `lax.cond`) cost 2.0 ms of Mixtral's 12.3 ms forward on the v5e
  (benchmarks/measured/v5e-2026-12-06-bench-moe_padded-callback.json); the check costs nothing, and `jax.export`
  (the Torch ops' path through torch-tpu) takes it, where it refuses a host callback. Within the tile hook's
  `upstream_heuristics()` traced sizes go to upstream's op as they are (the identity checks' lowering).
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

RAGGED_DOT = jax.lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])  # ragged_dot's: [m, k] x [g, k, n]


def _shape(op: str, name: str, x: Any) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"tokamax {op}: {name} must be an array, got {type(x).__name__}")
    return tuple(shape)


def rows(op: str, lhs: Any, rhs: Any, group_sizes: Any, dims: jax.lax.RaggedDotDimensionNumbers,
         shard: bool = False) -> int:
    """The rows (lhs's ragged dimension) after the checks that need no values: ranks where the dimension numbers
    have no batch dimensions, group_sizes an integer array, one size per group of rhs."""
    lhs_shape, rhs_shape = _shape(op, "lhs", lhs), _shape(op, "rhs", rhs)
    value = getattr(group_sizes, "value", group_sizes)  # upstream's GroupSizes holds the array as `value`
    sizes_shape = _shape(op, "group_sizes", value)
    (_, _), (lhs_batch, _) = dims.dot_dimension_numbers
    grouped = bool(dims.rhs_group_dimensions)
    if not lhs_batch:
        if len(lhs_shape) != 2:
            raise ValueError(f"tokamax {op}: lhs must be 2-D [m, k], got shape {lhs_shape}")
        want = 3 if grouped else 2
        if len(rhs_shape) != want:
            layout = "[groups, k, n]" if grouped else "[m, n]"
            raise ValueError(f"tokamax {op}: rhs must be {want}-D {layout}, got shape {rhs_shape}")
    dtype = np.dtype(value.dtype)
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"tokamax {op}: group_sizes must be an integer array (int32), got {dtype}")
    if grouped:
        groups = rhs_shape[dims.rhs_group_dimensions[0]]
        # with a group_offset rhs holds a shard of the groups (expert parallelism): the sizes name every group
        count_off = sizes_shape[-1] < groups if shard and sizes_shape else not sizes_shape or sizes_shape[-1] != groups
        if count_off or (not lhs_batch and len(sizes_shape) != 1):
            raise ValueError(f"tokamax {op}: group_sizes must have one entry per group of rhs ({groups}"
                             f"{' or more: rhs is a shard at group_offset' if shard else ''}), got shape {sizes_shape}")
    elif not lhs_batch and len(sizes_shape) != 1:
        raise ValueError(f"tokamax {op}: group_sizes must be 1-D [groups], got shape {sizes_shape}")
    return int(lhs_shape[dims.lhs_ragged_dimensions[0]])


def _shown(sizes: np.ndarray) -> str:
    flat = sizes.reshape(-1)
    return str(flat.tolist()) if flat.size <= 16 else f"{flat[:16].tolist()[:-1]}... ({flat.size} sizes)"


def _as_released() -> bool:
    """Within the tile hook's `upstream_heuristics()` the ragged dot lowers as upstream releases it (what the
    identity checks compare), traced sizes unguarded."""
    hook = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}._ported._src.ops.ragged_dot.tiles_hook")
    return hook.released()


def checked(op: str, group_sizes: Any, m: int) -> Any:
    """`group_sizes` (an array or upstream's GroupSizes) as the kernel may take them for `m` rows: refused where
    concrete and bad; where traced, clipped and flagged (see the module's docstring)."""
    value = getattr(group_sizes, "value", group_sizes)
    if not isinstance(value, jax.core.Tracer):
        sizes = np.asarray(value)
        if (sizes < 0).any():
            raise ValueError(f"tokamax {op}: group_sizes must be non-negative, got {_shown(sizes)}")
        total = int(sizes.sum(axis=-1).max()) if sizes.size else 0
        if total > m:
            raise ValueError(f"tokamax {op}: group_sizes sum to {total}, past lhs's {m} rows (the ragged "
                             f"dimension), got {_shown(sizes)}")
        return group_sizes
    if _as_released():
        return group_sizes
    positive = jnp.maximum(value, 0)
    ends = jnp.minimum(jnp.cumsum(positive, axis=-1), m).astype(value.dtype)
    clipped = jnp.diff(ends, axis=-1, prepend=jnp.zeros_like(ends[..., :1]))
    checkify.debug_check(jnp.all(value >= 0) & jnp.all(jnp.sum(positive, axis=-1) <= m),
                         f"tokamax {op}: group_sizes must be non-negative and sum to at most lhs's {m} rows, got {{}}; "
                         "clipped to the rows (rows of no group are zero)", value)
    if value is group_sizes:
        return clipped
    return type(group_sizes)(clipped, group_sizes.repr_value_or_total_size)
