"""The Torch op calls a step makes, kept where tuning reads them without importing the Torch ops.

`torch_ops` sits above `tuning` (its ops take the applied result from `tuning.active`), so the two meet
here: each Torch op made by `torch_ops._bridge.register` puts its JAX function in `FUNCTIONS` when it is
made and adds its calls to every open `recording()` block; `tuning.tune` reads both. Nothing here
imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class Call:
    """One recorded op call: the op's name, its JAX function (the TPU one, which takes the token last)
    and its arguments as JAX sees them (tensors as ShapeDtypeStructs, statics as they are, the token
    "": what the call would trace without a result)."""

    op: str
    jax_fn: Callable[..., Any]
    args: tuple

    @property
    def key(self) -> tuple:
        return (self.op, tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else a for a in self.args))


FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""Every Torch op made in this process: its name -> its JAX function (what a saved recording binds to)."""


def register(name: str, jax_fn: Callable[..., Any]) -> None:
    """Notes the op `name` and its JAX function (`torch_ops._tuned.TunedOp` does, when it is made)."""
    FUNCTIONS[name] = jax_fn


_RECORDINGS: list[dict[tuple, Call]] = []
_LOCK = threading.Lock()


@contextlib.contextmanager
def recording() -> Iterator[dict[tuple, Call]]:
    """Within the block, every call of a registered op (forward and backward, from any thread:
    continuous batching runs its forwards in a thread of its own) is recorded once per distinct
    signature; yields the record (key -> Call), in the order first seen."""
    calls: dict[tuple, Call] = {}
    with _LOCK:
        _RECORDINGS.append(calls)
    try:
        yield calls
    finally:
        with _LOCK:
            _RECORDINGS.remove(calls)


def open_recordings() -> bool:
    """Whether any `recording()` block is open: the one check an op call pays outside them."""
    return bool(_RECORDINGS)


def add(seen: tuple, make: Callable[[], Call]) -> None:
    """Records the call whose signature is `seen` in each open block that lacks it (`make` builds it, once)."""
    with _LOCK:
        call = None
        for calls in _RECORDINGS:
            if seen not in calls:  # a signature seen before costs this probe only
                call = call or make()
                calls[seen] = call
