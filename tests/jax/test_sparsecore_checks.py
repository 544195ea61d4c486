"""The SparseCore gathers' hidden-size check (`ops._sparsecore`): a hidden size off the 128 lanes is
refused by name when only the kernel is asked for, and goes on to XLA when the list allows it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

HIDDEN = 2880  # gpt-oss-120b's, 22.5 lane tiles


def _gather_args() -> tuple:
    x = jnp.arange(8 * HIDDEN, dtype=jnp.float32).reshape(8, HIDDEN)
    return x, jnp.array([3, 1, 7, 0], jnp.int32), jnp.array([0], jnp.int32), jnp.array([4], jnp.int32)


def _reduce_args() -> tuple:
    x = jnp.ones((8, HIDDEN), jnp.bfloat16)
    return x, jnp.arange(8, dtype=jnp.int32), jnp.ones((8,), jnp.bfloat16), jnp.ones((8,), bool)


@pytest.mark.parametrize("op,kernel_name,args", [
    ("ragged_gather", "mosaic", _gather_args), ("ragged_gather_reduce", "mosaic_tpu", lambda: (*_reduce_args(), 2)),
])
def test_off_the_lanes_refused_by_name(kernel, op, kernel_name, args):
    with pytest.raises(NotImplementedError, match=rf"tokamax {op}: x's hidden size \(2880\) must be a multiple of "
                                                  r"128 .*pad x's rows to 2944"):
        getattr(kernel.ops, op)(*args(), implementation=kernel_name)


def test_gather_goes_on_to_xla(kernel):
    x, indices, start, end = _gather_args()
    for implementation in (None, ("mosaic", "xla")):
        out = jax.jit(lambda *a, i=implementation: kernel.ops.ragged_gather(*a, implementation=i))(x, indices, start,
                                                                                                 end)
        np.testing.assert_array_equal(np.asarray(out)[:4], np.asarray(x)[[3, 1, 7, 0]])


def test_reduce_goes_on_to_xla(kernel):
    out = kernel.ops.ragged_gather_reduce(*_reduce_args(), 2)
    assert out.shape == (4, HIDDEN)
    np.testing.assert_array_equal(np.asarray(out, np.float32), 2.0)
