"""SparseCore ragged gather (`ragged_gather_pallas`): cases for lowering, interpret numerics and Mosaic identity.

Only rows `[start, end)` of the output are defined, so they alone are compared, bit for bit, with `x[indices]`.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.ragged_gather.pallas_mosaic_tpu_kernel"
SPARSECORE_XFAIL = (
    "JAX's Pallas TPU interpreter has no rules for SparseCore primitives: `plsc.parallel_loop` falls through to "
    "`parallel_loop_p.bind` on an interpreter buffer id, so tracing the interpreted kernel fails with "
    "`ValueError: JaxprInputEffect Read|Write<...:int16[]> does not have a corresponding jaxpr input` (surfacing as "
    "`AttributeError: 'Fake' object has no attribute 'arg_names'` while JAX formats that error)"
)


def _inputs(in_size: int, out_size: int, hidden: int, start: int, end: int, dtype) -> tuple[np.ndarray, ...]:  # noqa: ANN001
    r = rng(in_size + out_size + hidden)
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        x = r.integers(int(info.min), int(info.max) + 1, size=(in_size, hidden)).astype(dtype)
    else:
        x = r.standard_normal((in_size, hidden), np.float32).astype(dtype)
    indices = r.integers(0, in_size, size=(out_size,)).astype(np.int32)
    return x, indices, np.array([start], np.int32), np.array([end], np.int32)


def _reference(get):  # noqa: ANN001, ANN202
    return lambda x, indices, start, end: jnp.asarray(x)[indices]


def _compare(inputs, out, expected) -> None:  # noqa: ANN001
    _, indices, start, end = inputs()
    out, expected = np.asarray(out), np.asarray(expected)
    assert out.shape[0] >= indices.size and out.shape[1:] == expected.shape[1:], (out.shape, expected.shape)
    rows = slice(int(start[0]), int(end[0]))
    np.testing.assert_array_equal(out[rows].view(np.uint8), expected[rows].view(np.uint8))


def _case(in_size: int, out_size: int, hidden: int, start: int, end: int, dtype, **kw) -> Case:  # noqa: ANN001
    inputs = functools.partial(_inputs, in_size, out_size, hidden, start, end, dtype)
    name = jnp.dtype(dtype).name
    extra = "".join(f"-{k}{int(v)}" for k, v in kw.items())
    return Case(
        id=f"ragged_gather/{name}-{in_size}x{hidden}-out{out_size}-rows{start}_{end}{extra}",
        call=lambda get: functools.partial(get(KERNEL).ragged_gather_pallas, **kw),
        inputs=inputs,
        reference=_reference,
        compare=functools.partial(_compare, inputs),
        tolerance_why="exact: a gather only moves bits (packed 16/8-bit rows are unpacked by shifts and masks)",
        # SparseCore kernel, generic in the lane count: v6e (8 lanes) lowers too, as upstream's op admits it;
        # upstream tests it on TPU7x only. v5e has no SparseCore, and the wrapper falls back to `x[indices]`.
        chips=("v6e", "v7x"),
        interpret_chip="v7x",
        interpret_xfail=SPARSECORE_XFAIL,
        interpret_raises=(AttributeError, "'Fake' object has no attribute 'arg_names'"),
    )


CASES = [
    _case(64, 40, 128, 3, 28, np.float32),
    # bf16 is row-packed in pairs; 600 rows take two row subchunks per subcore and are not trimmed.
    _case(64, 600, 256, 10, 422, jnp.bfloat16, trim_rows=False),
    # int8 packs four rows per 32-bit word; one row subchunk per block.
    _case(128, 300, 128, 0, 300, np.int8, max_row_subchunks=1),
]
