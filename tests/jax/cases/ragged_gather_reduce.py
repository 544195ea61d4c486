"""SparseCore ragged gather reduce (MoE combine): cases for lowering, interpret numerics and Mosaic identity.

The kernel needs a SparseCore with 16 lanes (`get_unsupported_reason`), so it supports only TPU7x: v6e's
SparseCore has 8 lanes and v5e has none. Upstream skips its tests below generation 7.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.ragged_gather_reduce.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.ragged_gather_reduce.reference"
SPARSECORE_XFAIL = (
    "JAX's Pallas TPU interpreter has no rules for SparseCore primitives: `plsc.parallel_loop` falls through to "
    "`parallel_loop_p.bind` on an interpreter buffer id, so tracing the interpreted kernel fails with "
    "`ValueError: JaxprInputEffect Read|Write<...:int16[]> does not have a corresponding jaxpr input` (surfacing as "
    "`AttributeError: 'Fake' object has no attribute 'arg_names'` while JAX formats that error)"
)


def _inputs(tokens: int, group: int, hidden: int, rows: int, valid: str) -> tuple[np.ndarray, ...]:
    r = rng(tokens * group + hidden + rows)
    x = r.standard_normal((rows, hidden), np.float32).astype(jnp.bfloat16)
    indices = r.integers(0, rows, size=(tokens * group,)).astype(np.int32)
    weights = r.random((tokens * group,), np.float32).astype(jnp.bfloat16)
    if valid == "all":
        mask = np.ones((tokens * group,), np.bool_)
    else:
        mask = r.random((tokens * group,)) < 0.7
    return x, indices, weights, mask


def _case(tokens: int, group: int, hidden: int, rows: int, valid: str, partitions: int | None, why: str) -> Case:
    return Case(
        id=f"ragged_gather_reduce/{why}-t{tokens}-g{group}-h{hidden}-rows{rows}-{valid}-cp{partitions}",
        call=lambda get: lambda x, i, w, m: get(KERNEL).ragged_gather_reduce(
            x, i, w, m, group, num_column_partitions=partitions),
        inputs=functools.partial(_inputs, tokens, group, hidden, rows, valid),
        reference=lambda get: functools.partial(get(REFERENCE).ragged_gather_reduce, reduce_group_size=group),
        tolerance=(1e-2, 1e-2),
        tolerance_why="bf16 rows and weights, both sides accumulate in f32 in a different order and round to bf16: "
        "at most about one bf16 ulp (2^-7 relative) apart",
        chips=("v7x",),  # SparseCore with 16 lanes: TPU7x only.
        interpret_chip="v7x",
        interpret_xfail=SPARSECORE_XFAIL,
        interpret_raises=(AttributeError, "'Fake' object has no attribute 'arg_names'"),
    )


CASES = [
    # One 64-token block with every token's two routes valid and adjacent: the fixed two-route fast path.
    _case(64, 2, 256, 128, "all", None, "two_route"),
    # ~70% valid routes (generic path), 70 tokens (token padding), an odd row count (row padding),
    # and the columns split over two partitions.
    _case(70, 4, 512, 101, "random", 2, "generic"),
]
