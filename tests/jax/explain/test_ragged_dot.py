"""`tokamax.explain` on the grouped matmul gives the tiles and VMEM limits the call lowers with: the lowered module's
profiling payloads (upstream's Op records the Config each kernel call ran with) and its Mosaic calls' scoped-VMEM
configs, for the forward and both backward kernels, on chips where the tiles come from upstream's tuned table, the
package's rule and upstream's TPU7x heuristic."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tests.tpu_compile.test_ragged_dot_tiles import kernel_calls, vmem_limits

S = jax.ShapeDtypeStruct
SHAPES = {
    "mixtral": ((8192, 4096), (8, 4096, 14336)),  # the forward in upstream's v5e, v6e and v7x tables
    "uneven": ((1536, 768), (3, 768, 640)),  # in no table: the rule before TPU7x
}


def _lowered(kernel, chip: str, lhs: S, rhs: S, gs: S, grad: bool) -> str:  # noqa: ANN001
    def forward(a, b, g):  # noqa: ANN001, ANN202
        return kernel.ops.ragged_dot(a, b, g).astype(jnp.float32).sum()

    fn = jax.value_and_grad(forward, (0, 1)) if grad else forward  # the forward kept (grad alone drops it)
    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh(chip)):
        return jax.jit(fn).trace(lhs, rhs, gs).lower(lowering_platforms=("tpu",)).as_text()


@pytest.mark.kernels_ci
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "forward"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7x"])
def test_explain_gives_the_tiles_and_vmem_limits_the_call_lowers_with(kernel, chip, shape, grad):
    (m, k), (g, _, n) = SHAPES[shape]
    lhs, rhs, gs = S((m, k), jnp.bfloat16), S((g, k, n), jnp.bfloat16), S((g,), jnp.int32)
    explained = kernel.explain(kernel.ops.ragged_dot, lhs, rhs, gs, chip=chip, grad=grad)
    text = _lowered(kernel, chip, lhs, rhs, gs, grad)
    calls, limits = kernel_calls(text), vmem_limits(text)
    if explained.path.startswith("xla"):  # upstream's v7x heuristic takes 1024 rows, which 1536 rows refuse
        assert (chip, shape) == ("v7x", "uneven") and not calls and not explained.choices, explained.path
        return
    assert {c.kernel for c in explained.choices} == set(calls) == ({"gmm", "dlhs", "tgmm"} if grad else {"gmm"})
    for choice in explained.choices:
        [(config, *_)] = calls[choice.kernel]
        lowered = {name: value for name, value in config if name in choice.sizes}
        assert lowered == dict(choice.sizes), (chip, shape, choice.kernel, choice.source)
        assert limits[choice.kernel] == {choice.vmem_limit}, (chip, shape, choice.kernel)
    if shape == "mixtral":  # the call: upstream's table answers the forward on every chip
        assert explained["gmm"].source == "upstream's tuned table"
    if chip == "v7x":
        assert all(c.source in ("upstream's tuned table", "upstream's heuristics") for c in explained.choices)
    elif shape == "uneven":
        assert {c.source for c in explained.choices} <= {"the package's tile rule", "measured on the chip"}
