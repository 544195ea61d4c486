"""libtpu reads each LM-head kernel's declared `pl.CostEstimate` (`tokamax.lm_head.cost`): a program that
is just the kernel compiles to `cost_analysis()` flops, transcendentals and bytes accessed equal to the
cost model's, so XLA's scheduler sees what the kernel costs (the jax tier checks the declaration)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tools.tpu_compile import compiler, topology
from tools.tpu_compile.case import spec

KERNELS = ("forward", "backward_x", "backward_w")


@pytest.mark.parametrize("which", KERNELS)
@pytest.mark.parametrize("vocab", [1536, 1500])
def test_the_compiler_reports_the_declared_cost(kernel, which, vocab):
    """At a vocabulary the blocks divide, and one whose last block runs past the weight (1,500 in 512s)."""
    lm_head = kernel.lm_head
    rows, hidden, blocks = 1024, 1024, lm_head.Blocks(256, 512)
    mesh = topology.mesh("v6e")
    specs = [spec(mesh, (rows, hidden), jnp.bfloat16), spec(mesh, (vocab, hidden), jnp.bfloat16),
             spec(mesh, (1, 1536), jnp.float32), spec(mesh, (rows,), jnp.int32)]
    specs += [spec(mesh, (rows,), jnp.float32)] * (5 if which != "forward" else 0)
    call = getattr(lm_head.kernels, which)
    with compiler.tracing_for(kernel, "v6e"), jax.set_mesh(mesh):
        lowered = jax.jit(lambda *a: call(*a, transform=lm_head.IDENTITY, blocks=blocks, true_vocab=vocab)).trace(
            *specs).lower(lowering_platforms=("tpu",))
    reported = lowered.compile().cost_analysis()
    reported = reported[0] if isinstance(reported, (list, tuple)) else reported
    model = getattr(lm_head.cost, which)(rows, hidden, vocab, 2, blocks)
    assert (reported["flops"], reported["transcendentals"], reported["bytes accessed"]) == (
        model.flops, model.transcendentals, model.bytes_accessed)
