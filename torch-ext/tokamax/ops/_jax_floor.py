"""Upstream's public ops whose kernels need a newer JAX than the one running (tokamax 0.0.17 needs jax >=
0.11.1; this kernel also runs on jax 0.10.2): refused by name, with the JAX they need, before upstream's code
fails on a missing attribute (`pltpu.TensorCoreMesh`, `jax.experimental.mosaic.OptLevel`). The Torch ops
refuse through the same check (`torch_ops._checks.jax_has`)."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .. import hosts
from . import _group_sizes

TENSORCORE_MESH = ("jax.experimental.pallas.tpu", "TensorCoreMesh", "pltpu.TensorCoreMesh")
MOSAIC_OPT_LEVEL = ("jax.experimental.mosaic", "OptLevel", "jax.experimental.mosaic.OptLevel")
FLOOR = "0.11.1"

_OPS = "._ported._src.ops"
NEEDS = {
    "linear_softmax_cross_entropy_loss": (f"{_OPS}.linear_softmax_cross_entropy_loss.api", TENSORCORE_MESH),
    "top_k": (f"{_OPS}.topk.api", MOSAIC_OPT_LEVEL),
    "lightning_indexer": (f"{_OPS}.lightning_indexer.api", MOSAIC_OPT_LEVEL),
}
"""Public op -> (upstream's module, what its kernel needs of JAX)."""
V2 = "mosaic_tpu_v2"  # the ragged dot's v2 kernels need TENSORCORE_MESH


def lacks(module: str, attribute: str, label: str) -> str | None:
    """Why the running JAX cannot run a kernel that needs `module.attribute`, or None where it can."""
    try:
        found = hasattr(importlib.import_module(module), attribute)
    except ImportError:
        found = False
    if found:
        return None
    import jax

    return f"needs jax >= {FLOOR} ({label}), this is jax {jax.__version__}"


def check(op: str, module: str, attribute: str, label: str) -> None:
    """A NotImplementedError naming `op` and the JAX it needs, where the running JAX lacks `module.attribute`."""
    if (why := lacks(module, attribute, label)) is not None:
        raise NotImplementedError(f"tokamax {op} {why}")


def _guarded(name: str) -> Callable[..., Any]:
    where, needs = NEEDS[name]

    def call(*args: Any, **kwargs: Any) -> Any:
        check(f"ops.{name}", *needs)
        return getattr(importlib.import_module(where, __package__.rsplit(".", 1)[0]), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Upstream's `{name}`, refused by name where the running JAX is older than its kernel needs."
    return call


def _without_v2(name: str, implementation: Any) -> Any:
    """`implementation` without the v2 kernels where the running JAX cannot run them; refused if nothing is left."""
    if lacks(*TENSORCORE_MESH) is None or implementation is None:
        return implementation
    if isinstance(implementation, str):
        if implementation == V2:
            check(f"ops.{name}(implementation={V2!r})", *TENSORCORE_MESH)
        return implementation
    if isinstance(implementation, Sequence):
        kept = tuple(i for i in implementation if i != V2)
        if not kept:
            check(f"ops.{name}(implementation={V2!r})", *TENSORCORE_MESH)
        return kept
    return implementation


def _ragged(name: str) -> Callable[..., Any]:
    @hosts.upstream_on_cpu(f"ops.{name}", f"jax.lax.{name}")
    @functools.wraps(getattr(importlib.import_module(f"{_OPS}.ragged_dot.api", __package__.rsplit(".", 1)[0]), name))
    def call(*args: Any, implementation: Any = None, **kwargs: Any) -> Any:
        upstream = getattr(importlib.import_module(f"{_OPS}.ragged_dot.api", __package__.rsplit(".", 1)[0]), name)
        # operands and group sizes checked first (refused where known wrong, clipped and flagged under jit); a call
        # without rows takes upstream's XLA path (the Mosaic kernel's tiling divides by the rows)
        bound = inspect.signature(upstream).bind(*args, **kwargs)
        dims = bound.arguments.get("ragged_dot_dimension_numbers", _group_sizes.RAGGED_DOT)
        m = _group_sizes.rows(f"ops.{name}", *(bound.arguments[a] for a in ("lhs", "rhs", "group_sizes")), dims,
                              shard=bound.arguments.get("group_offset") is not None)
        bound.arguments["group_sizes"] = _group_sizes.checked(f"ops.{name}", bound.arguments["group_sizes"], m)
        implementation = "xla" if m == 0 else _without_v2(name, implementation)
        return upstream(*bound.args, implementation=implementation, **bound.kwargs)
    return call


linear_softmax_cross_entropy_loss = _guarded("linear_softmax_cross_entropy_loss")
top_k = _guarded("top_k")
lightning_indexer = _guarded("lightning_indexer")


def __getattr__(name: str) -> Any:  # the ragged dots wrap upstream's functions: loaded on first use
    if name in ("ragged_dot", "ragged_dot_general"):
        value = globals()[name] = _ragged(name)
        return value
    raise AttributeError(name)
