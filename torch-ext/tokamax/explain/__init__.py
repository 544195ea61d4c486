"""`tokamax.explain(op, *args, chip=None, **kwargs)`: what the package chooses for a call and why, from the call's
shapes alone (nothing is compiled or run): for the grouped matmul (`ops.ragged_dot`) the implementation and each
kernel's tiles, where they came from, the VMEM limit and the roofline's time; for splash attention
(`splash.attend`) each kernel's blocks; for the LM head's loss (`lm_head.loss.loss`) the scheme, its chunk and
every scheme the cost model weighed within the share of HBM; for distillation (`distill.divergence`,
`distill.loss`) the scheme and chunk or blocks.

`op` is the function as called (`tokamax.ops.ragged_dot`) or its name ("ragged_dot", "splash", "lm_head",
"distill", "distill.loss"); the arguments are the call's own (arrays, `jax.ShapeDtypeStruct`s or Torch tensors);
`chip` names the chip ("v5e", "v5p", "v6e", "v7x"; default the attached TPU, on a CPU host the chip an enclosing
`tokamax.emulation` block emulates). Returns an `Explanation` (docs/choices.md).

The module itself is callable (`tokamax.explain(...)` is `tokamax.explain.explain(...)`), so the name is the call
however the package is imported. Nothing in the package imports this room: it reads the rooms' choices, as their
calls make them.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

from .report import Alternative, Choice, Explanation

FAMILIES = {
    "ragged_dot": ".ragged_dot",
    "splash": ".splash",
    "lm_head": ".lm_head",
    "distill": ".distill",
    "distill.loss": ".distill",
}
"""Each name `explain` takes -> the module that explains it."""

_FUNCTIONS = {
    "ragged_dot": ("ops", "ragged_dot"),
    "splash": ("splash", "attend"),
    "lm_head": ("lm_head.loss", "loss"),
    "distill": ("distill", "divergence"),
    "distill.loss": ("distill", "loss"),
}
"""Each name -> the public function it is the name of (module below the package, attribute)."""

__all__ = ["FAMILIES", "Alternative", "Choice", "Explanation", "explain"]


def _name(op: str | Callable[..., Any]) -> str:
    if isinstance(op, str):
        if op not in FAMILIES:
            raise ValueError(f"tokamax explain: no choices to explain for {op!r}; one of {sorted(FAMILIES)} (or the "
                             f"function: tokamax.ops.ragged_dot, tokamax.splash.attend, tokamax.lm_head.loss.loss, "
                             f"tokamax.distill.divergence, tokamax.distill.loss)")
        return op
    package = __name__.rsplit(".", 1)[0]
    for name, (module, attribute) in _FUNCTIONS.items():
        if getattr(importlib.import_module(f"{package}.{module}"), attribute) is op:
            return name
    raise ValueError(f"tokamax explain: no choices to explain for {getattr(op, '__qualname__', op)!r}; one of "
                     f"tokamax.ops.ragged_dot, tokamax.splash.attend, tokamax.lm_head.loss.loss, "
                     f"tokamax.distill.divergence, tokamax.distill.loss (or their names: {sorted(FAMILIES)})")


def explain(op: str | Callable[..., Any], *args: Any, chip: str | None = None, **kwargs: Any) -> Explanation:
    """What the package chooses for `op(*args, **kwargs)` on `chip` (the module docstring; docs/choices.md)."""
    name = _name(op)
    from . import target

    on = target.resolve(chip, (args, kwargs))
    family = importlib.import_module(FAMILIES[name], __name__)
    with target.tracing_for(on):
        if name == "distill.loss":
            return family.explain_loss(on, *args, **kwargs)
        return family.explain(on, *args, **kwargs)


class _Callable(types.ModuleType):
    """This module, callable as `explain`."""

    def __call__(self, op: str | Callable[..., Any], *args: Any, chip: str | None = None,
                 **kwargs: Any) -> Explanation:
        return explain(op, *args, chip=chip, **kwargs)


sys.modules[__name__].__class__ = _Callable
