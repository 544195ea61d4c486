"""Issue 70: on a host without a TPU the package's JAX ops enter the emulation themselves (`tokamax.hosts`), and
`interpret_on_cpu` makes the chip's choices. What is checked, on stand-in functions under the same decorator
(the mechanics, no kernel run) and on upstream's public ragged dot (its XLA fallback, said once):

- outside any block a decorated call is traced in interpret mode, emulating `TOKAMAX_CPU_CHIP` (default v6e),
  with upstream's device check skipped and upstream's tables keyed by the chip's device kind; it says so once
  per op, naming the op, the chip, that it is slow, and how to choose;
- inside `interpret_on_cpu(chip)` the caller's chip answers and nothing is said; under a TPU mesh set to lower
  for a TPU nothing is emulated (interpret mode would lower the interpreter instead of the kernel);
- a caller's `jax.jit` around the op traces it emulated; so is a custom VJP's backward, traced by `jax.grad`
  after the forward's call returned;
- `ops.ragged_dot` on the CPU runs upstream's XLA fallback and says so once, with how to run the kernel.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.kernels_ci


@pytest.fixture
def hosts(kernel) -> ModuleType:
    module = importlib.import_module(f"{kernel.__name__}.hosts")
    module.forget()
    yield module
    module.forget()


def seen(kernel: ModuleType) -> dict:
    """What a kernel traced here would see: the chip, interpret mode, the device kind upstream's tables are read
    by for a call with no concrete device, upstream's device check skipped."""
    from jax._src import config

    op = importlib.import_module(f"{kernel.__name__}._ported._src.ops.op")
    return {"chip": kernel.emulation.current_chip(),
            "interpret": config.pallas_tpu_interpret_mode_context_manager.value is not None,
            "device_kind": op.infer_device_kind(op.BoundArguments(None, {})),
            "cross_compile": bool(kernel.ops.config.cross_compile.value)}


def notes(caught: list, kernel: ModuleType) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, kernel.emulation.EmulationWarning)]


def test_outside_any_block_the_op_emulates_the_default_chip_and_says_so_once(kernel, hosts, monkeypatch):
    monkeypatch.delenv("TOKAMAX_CPU_CHIP", raising=False)
    probe = hosts.emulated("test.probe")(lambda: seen(kernel))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = probe(), probe()
    assert first == second == {"chip": "v6e", "interpret": True, "device_kind": "TPU v6 lite", "cross_compile": True}
    said = notes(caught, kernel)
    assert len(said) == 1, said
    for words in ("tokamax test.probe", "no TPU attached", "interpret mode", "emulating a v6e", "slow",
                  "TOKAMAX_CPU_CHIP", "interpret_on_cpu(chip)"):
        assert words in said[0], (words, said[0])
    assert seen(kernel)["chip"] is None  # nothing left open


def test_the_chip_named_by_the_environment(kernel, hosts, monkeypatch):
    monkeypatch.setenv("TOKAMAX_CPU_CHIP", "v5e")
    probe = hosts.emulated("test.probe")(lambda: seen(kernel))
    with pytest.warns(kernel.emulation.EmulationWarning, match="emulating a v5e"):
        got = probe()
    assert (got["chip"], got["device_kind"]) == ("v5e", "TPU v5 lite")


def test_a_block_of_the_callers_own_is_kept_and_silent(kernel, hosts):
    probe = hosts.emulated("test.probe")(lambda: seen(kernel))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with kernel.emulation.interpret_on_cpu("v7x"):
            got = probe()
        with jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh("v5e")):  # lowering for a TPU
            lowering = probe()
    assert not notes(caught, kernel)
    assert (got["chip"], got["interpret"], got["device_kind"]) == ("v7x", True, "TPU7x")
    assert (lowering["chip"], lowering["interpret"], lowering["device_kind"]) == (None, False, "TPU v5 lite")


def test_emulated_chip_alone_keys_upstreams_tables_by_the_chip(kernel):
    assert seen(kernel)["device_kind"] is None  # upstream's answer outside: the CPU's default device then
    with kernel.emulation.emulated_chip("v5e"):
        assert seen(kernel)["device_kind"] == "TPU v5 lite"


def test_a_callers_jit_and_a_backward_traced_later_are_emulated(kernel, hosts, monkeypatch):
    monkeypatch.delenv("TOKAMAX_CPU_CHIP", raising=False)
    traced: list[dict] = []

    @hosts.emulated("test.square")
    def forward(x: jax.Array) -> jax.Array:
        traced.append({"forward": seen(kernel)})
        return x * x

    @jax.custom_vjp
    def square(x: jax.Array) -> jax.Array:
        return forward(x)

    def square_fwd(x: jax.Array) -> tuple:
        return forward(x), x

    @hosts.emulated("test.square")
    def square_bwd(x: jax.Array, g: jax.Array) -> tuple:
        traced.append({"backward": seen(kernel)})
        return (2 * x * g,)

    square.defvjp(square_fwd, square_bwd)
    with pytest.warns(kernel.emulation.EmulationWarning):
        grad = jax.jit(jax.grad(lambda x: square(x).sum()))(jnp.arange(3.0))
    np.testing.assert_allclose(grad, [0.0, 2.0, 4.0])
    assert [list(t)[0] for t in traced] == ["forward", "backward"]
    for t in traced:
        got = next(iter(t.values()))
        assert (got["chip"], got["interpret"]) == ("v6e", True), t


def test_upstreams_ragged_dot_says_it_took_xla_once(kernel, hosts):
    ops = kernel.ops
    lhs, rhs = jnp.ones((64, 128), jnp.float32), jnp.ones((2, 128, 128), jnp.float32)
    sizes = jnp.array([30, 20], jnp.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ops.ragged_dot(lhs, rhs, sizes)
        ops.ragged_dot(lhs, rhs, sizes)
        ops.ragged_dot(lhs, rhs, sizes, implementation="xla")  # chosen: nothing said
    np.testing.assert_allclose(out, jax.lax.ragged_dot(lhs, rhs, sizes))
    said = notes(caught, kernel)
    assert len(said) == 1, said
    assert "ops.ragged_dot" in said[0] and "XLA fallback ran (jax.lax.ragged_dot)" in said[0]
    assert "interpret_on_cpu(chip), tokamax.ops.config.cross_compile(True)" in said[0]


def test_a_function_over_a_mesh_of_tpus_is_traced_for_the_chips(kernel, hosts):
    """Ring attention's shard_map runs over its layout's mesh: TPU devices there (an abstract mesh of TPUs, or
    compile-only devices of kind "TPU ...") mean a lowering for the chips, not a CPU run to emulate."""

    class CompileOnly:  # torch-tpu's compile-only devices: no platform, a TPU device kind
        device_kind = "TPU v6 lite"

    assert hosts.on_tpus(kernel.emulation.tpu_mesh("v6e", "sp", 2))
    assert hosts.on_tpus(jax.sharding.Mesh(np.array([CompileOnly(), CompileOnly()]), ("sp",)))
    assert not hosts.on_tpus(jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("sp",)))
    assert not hosts.on_tpus(jax.sharding.AbstractMesh((2,), ("sp",)))
