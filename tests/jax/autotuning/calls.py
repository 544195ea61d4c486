"""The ragged dot every autotuning test tunes and lowers, on either side (upstream or this kernel).

Small enough that its whole search space (6 configs) runs in Pallas TPU interpret mode in seconds,
large enough that the candidates differ in tiles, so a config that steers a call shows in its module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

CHIP = "v6e"
DEVICE_KIND = "TPU v6 lite"
LHS, RHS, GROUPS = (128, 256), (2, 256, 128), (64, 64)


def specs() -> tuple[jax.ShapeDtypeStruct, ...]:
    return (jax.ShapeDtypeStruct(LHS, jnp.bfloat16), jax.ShapeDtypeStruct(RHS, jnp.bfloat16),
            jax.ShapeDtypeStruct((len(GROUPS),), jnp.int32))


def arrays() -> tuple[jax.Array, ...]:
    keys = jax.random.split(jax.random.key(0), 2)
    return (jax.random.normal(keys[0], LHS, jnp.bfloat16), jax.random.normal(keys[1], RHS, jnp.bfloat16),
            jnp.asarray(GROUPS, jnp.int32))


def public_call(ops: Any) -> Callable[..., Any]:
    """The public call, its config left to the Op's choice."""
    return lambda lhs, rhs, sizes: ops.ragged_dot(lhs, rhs, sizes)


def explicit_call(ops: Any, op_class: type, config: Any) -> Callable[..., Any]:
    """The same public call with `config` passed by the caller (device check as in the public call)."""
    return lambda lhs, rhs, sizes: ops.ragged_dot(lhs, rhs, sizes, implementation=[op_class(config=config)],
                                                  bypass_device_check=False)


@contextlib.contextmanager
def for_tpu(config: Any, emulation: ModuleType, chip: str = CHIP) -> Iterator[None]:
    """Traces inside lower for `chip` on this CPU host (upstream's cross-compile, chip emulated)."""
    with config.cross_compile(True), emulation.emulated_chip(chip), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        yield


def lower(fn: Callable[..., Any], config: Any, emulation: ModuleType, chip: str = CHIP) -> str:
    """StableHLO of `fn` at `specs()` for `chip`."""
    with for_tpu(config, emulation, chip):
        return jax.jit(fn).trace(*specs()).lower(lowering_platforms=("tpu",)).as_text()
