"""A call no tuned table holds logs its autotuning-cache miss at debug level only: a ragged dot logged two multi-KB
warnings per call (four under `jax.grad`); `logging.getLogger("tokamax").setLevel(logging.DEBUG)` shows them."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import pytest

S = jax.ShapeDtypeStruct
MISS = "Autotuning cache miss"


def _trace(kernel) -> None:  # noqa: ANN001
    def f(a, b, g):  # noqa: ANN001, ANN202
        return kernel.ops.ragged_dot(a, b, g).astype(jnp.float32).sum()

    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip("v5e"), \
            jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh("v5e")):
        jax.jit(jax.value_and_grad(f, (0, 1))).trace(S((1536, 768), jnp.bfloat16), S((3, 768, 640), jnp.bfloat16),
                                                     S((3,), jnp.int32))


@pytest.mark.kernels_ci
def test_cache_misses_are_debug_records_shown_when_asked_for(kernel, caplog):
    caplog.set_level(logging.INFO)
    _trace(kernel)
    assert not [r for r in caplog.records if MISS in r.getMessage()], "a cache miss logged at the default level"
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="tokamax")
    _trace(kernel)
    misses = [r for r in caplog.records if MISS in r.getMessage()]
    assert len(misses) == 3 and {r.levelno for r in misses} == {logging.DEBUG}, misses  # gmm, dlhs, tgmm
