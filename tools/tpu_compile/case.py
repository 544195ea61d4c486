"""A compile case: one call of this kernel at one model's shapes on one chip or pod, and its expected end."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

COMPILES = "compiles"
# `expect` of a call the kernel accepts and libtpu is known to refuse (a gap we have not closed yet, kept
# in sight): "libtpu: " and a piece of the compiler's message
KNOWN_COMPILER_ERROR = "libtpu: "


@dataclasses.dataclass(frozen=True)
class Case:
    """`build(kernel, mesh)` returns `(fn, specs)`: the function to compile and its arguments'
    `jax.ShapeDtypeStruct`s (each with a sharding on `mesh`; `spec` makes one).

    `expect` is `COMPILES`, or a piece of the message the kernel refuses the call with (before the
    compiler sees it), or `KNOWN_COMPILER_ERROR` and a piece of libtpu's message (a known gap). `tier`
    "default" runs in ./test.sh, "all" only under `./test.sh --all`.
    """

    id: str  # family/model/what, e.g. "ragged_dot/Mixtral-8x7B/fwd+bwd"
    family: str
    model: str  # where the shapes come from
    target: str  # a chip ("v6e") or a pod ("v6e:2x4"), tools/tpu_compile/topology.py
    build: Callable[[ModuleType, Any], tuple[Callable[..., Any], list[jax.ShapeDtypeStruct]]]
    expect: str = COMPILES
    tier: str = "default"
    axes: tuple[str, ...] = ("x",)
    mesh_shape: tuple[int, ...] | None = None
    check: Callable[[Any], None] | None = None  # asserts on a compiled case's `compiler.Outcome`
    xla_only: bool = False  # the call may compile to XLA's own ops alone (a scheme without a kernel; `check` says)

    @property
    def name(self) -> str:
        return f"{self.id}@{self.target}"


def spec(mesh: Any, shape: tuple[int, ...], dtype: Any, partition: tuple = ()) -> jax.ShapeDtypeStruct:
    """An argument of `shape` and `dtype`, laid out on `mesh` by `partition` (replicated by default)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=NamedSharding(mesh, PartitionSpec(*partition)))


def on_chips(make: Callable[[str], Case], chips: tuple[str, ...] = ("v5e", "v6e", "v7x")) -> list[Case]:
    """The same case for each chip."""
    return [make(chip) for chip in chips]
