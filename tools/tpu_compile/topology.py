"""TPU chips and pods by the names JAX's topology registry knows, and meshes over their devices.

Compile-only devices: JAX compiles for them on a CPU host and cannot hold data on them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

# Our chip names (tokamax.emulation) -> the one-chip topology; pods are named as JAX names them.
CHIPS: dict[str, str] = {"v5e": "v5e:1x1", "v6e": "v6e:1x1", "v7x": "tpu7x:1x1x1"}
PODS: tuple[str, ...] = ("v6e:2x4", "tpu7x:2x2x1")
# device kind -> our chip name
KINDS: dict[str, str] = {"TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v6 lite": "v6e", "TPU7x": "v7x"}


def topology_name(target: str) -> str:
    """`target` is a chip ("v6e") or a pod's topology name ("v6e:2x4")."""
    if target in CHIPS:
        return CHIPS[target]
    if ":" in target:
        return target
    raise ValueError(f"unknown TPU target {target!r}: a chip ({sorted(CHIPS)}) or a topology such as {PODS[0]!r}")


@functools.cache
def devices(target: str) -> tuple[Any, ...]:
    """The compile-only devices of `target`'s topology."""
    from jax.experimental import topologies

    return tuple(topologies.get_topology_desc(platform="tpu", topology_name=topology_name(target)).devices)


def chip(target: str) -> str:
    """Our name of the chip `target` is made of."""
    kind = devices(target)[0].device_kind
    if kind not in KINDS:
        raise ValueError(f"{target}: device kind {kind!r} is none of {sorted(KINDS)}")
    return KINDS[kind]


def mesh(target: str, axes: tuple[str, ...] = ("x",), shape: tuple[int, ...] | None = None) -> Any:
    """A mesh over `target`'s devices (`shape` defaults to all along the first axis). A chip's mesh is
    its first device: JAX sees a v7x chip as two devices, one per TensorCore, and a kernel runs on one."""
    from jax.sharding import Mesh

    chips = devices(target)[:1] if target in CHIPS else devices(target)
    shape = shape or (len(chips),) + (1,) * (len(axes) - 1)
    if int(np.prod(shape)) != len(chips):
        raise ValueError(f"{target} has {len(chips)} chips; a mesh of shape {shape} needs {int(np.prod(shape))}")
    return Mesh(np.array(chips).reshape(shape), axes)
