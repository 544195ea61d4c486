"""SparseCore top-k (`sparsecore_topk`): cases for lowering, interpret numerics and Mosaic identity.

The kernel runs on the SparseCore vector subcores (2 cores x 16 subcores, 16 lanes, hard-coded), so it
supports only TPU7x: upstream skips its tests below generation 7, and v5e has no SparseCore at all.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import Case, rng

KERNEL = "_src.ops.topk.pallas_mosaic_tpu_kernel"
REFERENCE = "_src.ops.topk.reference"
SPARSECORE_XFAIL = (
    "JAX's Pallas TPU interpreter has no rules for SparseCore primitives: `plsc.parallel_loop` falls through to "
    "`parallel_loop_p.bind` on an interpreter buffer id, so tracing the interpreted kernel fails with "
    "`ValueError: JaxprInputEffect Read|Write<...:int16[]> does not have a corresponding jaxpr input` (surfacing as "
    "`AttributeError: 'Fake' object has no attribute 'arg_names'` while JAX formats that error)"
)


def _inputs(b: int, n: int, k: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    r = rng(b + n + k)
    if kind == "ties":
        # Few distinct values, so the boundary bucket is split by the quota; -inf is never selected.
        scores = r.integers(-5, 5, size=(b, n)).astype(np.float32)
        scores[0, :] = -np.inf
        scores[1, 10:] = -np.inf
    else:
        scores = r.standard_normal((b, n), np.float32)
    # Empty, shorter-than-k, exactly-k and half rows, then random lengths.
    head = [0, k // 2, k, n // 2]
    lengths = np.array(head + list(r.integers(0, n + 1, size=b - len(head))), np.int32)
    return scores, lengths


def _call(get, k: int):  # noqa: ANN202
    return lambda scores, lengths: get(KERNEL).sparsecore_topk(scores, k, lengths, return_scores=True)


def _reference(get, k: int):  # noqa: ANN202
    return lambda scores, lengths: get(REFERENCE).topk(scores, k, lengths, return_scores=True)


def _compare(inputs, out, expected) -> None:  # noqa: ANN001
    """Indices are unsorted and ties may pick any column: compare selected values exactly instead."""
    scores, lengths = inputs()
    idx, bits = (np.asarray(a) for a in out)
    ref_idx, ref_bits = (np.asarray(a) for a in expected)
    assert idx.shape == ref_idx.shape and bits.shape == ref_bits.shape, (idx.shape, ref_idx.shape)
    got = np.asarray(jax.lax.bitcast_convert_type(jnp.asarray(bits), jnp.float32))
    want = np.asarray(jax.lax.bitcast_convert_type(jnp.asarray(ref_bits), jnp.float32))
    for i in range(idx.shape[0]):
        live = idx[i][idx[i] >= 0]
        n_live = live.size
        assert np.all(idx[i, n_live:] == -1), f"row {i}: -1 padding is not a suffix: {idx[i]}"
        assert n_live == np.count_nonzero(ref_idx[i] >= 0), f"row {i}: {n_live} indices selected"
        assert np.unique(live).size == n_live, f"row {i}: duplicate indices {live}"
        assert np.all(live < lengths[i]), f"row {i}: index beyond row length {lengths[i]}"
        np.testing.assert_array_equal(np.sort(scores[i, live])[::-1], want[i, :n_live], err_msg=f"row {i}")
        np.testing.assert_array_equal(got[i, :n_live], scores[i, live], err_msg=f"row {i}: scores vs indices")
        assert np.all(got[i, n_live:] == -np.inf), f"row {i}: pad slots must hold -inf"


def _case(b: int, n: int, k: int, kind: str, why: str) -> Case:
    inputs = functools.partial(_inputs, b, n, k, kind)
    return Case(
        id=f"topk/{why}-{kind}-b{b}-n{n}-k{k}",
        call=lambda get: _call(get, k),
        inputs=inputs,
        reference=lambda get: _reference(get, k),
        compare=functools.partial(_compare, inputs),
        tolerance_why="exact: selection only moves f32 bits; values compared bit-exactly, indices must point at them",
        chips=("v7x",),  # SparseCore with 16 lanes: TPU7x only.
        interpret_chip="v7x",
        interpret_xfail=SPARSECORE_XFAIL,
        interpret_raises=(AttributeError, "'Fake' object has no attribute 'arg_names'"),
    )


CASES = [
    # b = 32 fills all 32 subcores: one stage (partition factor 1).
    _case(32, 2048, 16, "normal", "single_stage"),
    # b = 4 splits each row over 8 subcores, then merges the candidates: two stages.
    _case(4, 1024, 32, "ties", "two_stage"),
]
