"""Which autotuning result applies to a call: the innermost `use` block, else the file that
`TOKAMAX_AUTOTUNING_RESULT` names; and `applied(token)`, which steers a traced call by it.

A `use` block covers all the work it starts: the Torch ops take its token in any thread while it is
open (a thread's own block first, else the innermost block open in the process), so continuous
batching's worker thread, torch-tpu's autograd thread and threads a step starts run under it as the
block's own thread does; a context variable alone would leave every other thread untuned (threads do
not inherit it). Each op's backward takes its forward's token (`torch_ops._tuned`), wherever and
whenever it runs. JAX calls traced directly see the block in its own context only, as upstream's
`with result:` (its overlay is a context variable).

Torch ops pass `token()` to their custom op as a static argument, so torch-tpu keys its export on
the result (a different result, a different export) and traces with `applied(token)` around the
JAX call. A token is the sha256 of the result's bytes, so the same file gives the same token in
every process.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import emulation
from .files import AutotuningFileError, parse, read_bytes

ENVIRONMENT_VARIABLE = "TOKAMAX_AUTOTUNING_RESULT"


@dataclasses.dataclass(frozen=True)
class Applied:
    """A result ready to apply: the result, where it came from, and its token."""

    result: Any
    source: str
    token: str


_REGISTRY: dict[str, Applied] = {}
_STACK: contextvars.ContextVar[tuple[Applied, ...]] = contextvars.ContextVar("tokamax_tuning", default=())
# (block, result) of every block open in the process, in the order opened: a tuple replaced whole under the
# lock, so that a call reads it without taking the lock
_OPEN: tuple[tuple[object, Applied], ...] = ()
_OPEN_LOCK = threading.Lock()
_FROM_ENVIRONMENT: dict[tuple[str, int, int], Applied] = {}


def _token(data: bytes) -> str:
    return "autotuning:" + hashlib.sha256(data).hexdigest()[:24]


def _from_path(path: str | Path) -> Applied:
    data = read_bytes(path)
    if (found := _REGISTRY.get(_token(data))) is None:  # the same bytes are read once per process
        found = _REGISTRY[_token(data)] = Applied(parse(data, str(path)), str(path), _token(data))
    return found


def _from_environment() -> Applied | None:
    path = os.environ.get(ENVIRONMENT_VARIABLE)
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError as e:
        raise AutotuningFileError(f"tokamax autotuning result {ENVIRONMENT_VARIABLE}={path}: cannot read it "
                                  f"({e.strerror})") from e
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _FROM_ENVIRONMENT:
        try:
            _FROM_ENVIRONMENT[key] = _from_path(path)
        except AutotuningFileError as e:
            raise AutotuningFileError(f"{ENVIRONMENT_VARIABLE}: {e}") from e
    return _FROM_ENVIRONMENT[key]


def current() -> Applied | None:
    """The result that applies here: the innermost `use` block of this context, else the innermost one open
    in the process (in another thread), else the environment's, else None."""
    stack = _STACK.get()
    if stack:
        return stack[-1]
    blocks = _OPEN
    return blocks[-1][1] if blocks else _from_environment()


def token() -> str:
    """What a Torch op passes to its custom op: the applied result's token, or "" for none."""
    found = current()
    return found.token if found is not None else ""


def call_device_kind() -> str | None:
    """The device kind a call traced here runs on (an abstract mesh's chip, an emulated chip, the
    TPU JAX sees), or None where it is not known (JAX on a CPU host without a chip named)."""
    import jax

    mesh = jax.sharding.get_abstract_mesh()
    device = getattr(mesh, "abstract_device", None) if not mesh.empty else None
    if device is not None:
        return device.device_kind
    if (chip := emulation.current_chip()) is not None:
        return emulation.CHIPS[chip][0]
    if jax.default_backend() == "tpu":
        return jax.devices()[0].device_kind
    return None


def _check_chip(found: Applied, what: str) -> None:
    kind = call_device_kind()
    if kind is not None and kind != found.result.device_kind:
        raise AutotuningFileError(f"tokamax {what}: autotuning result {found.source} was tuned on "
                                  f"{found.result.device_kind!r} (its device_kind), but this call runs on {kind!r}; "
                                  "tune on this chip, or apply a result made for it")


_IDLE: dict[str, list[Any]] = {}  # token -> copies of its result not entered now


@contextlib.contextmanager
def _entered(found: Applied) -> Iterator[None]:
    """`with found.result:` on a copy of its own. Upstream's `AutotuningResult` keeps its context state
    on the instance, so one instance entered twice (a `use` block around a Torch op's trace) would
    break; and its instance's id is part of JAX's jit cache key, so a block entered again takes the
    same idle copy (no retrace for the same result)."""
    idle = _IDLE.setdefault(found.token, [])
    result = idle.pop() if idle else dataclasses.replace(found.result)
    try:
        with result:
            yield
    finally:
        idle.append(result)


@contextlib.contextmanager
def use(result: Any) -> Iterator[Applied]:
    """Within the block, JAX calls and Torch ops use `result` (an `AutotuningResult`, or the path of
    its JSON); the file is read whole first, and a call on another chip than its own is refused. Torch
    ops in other threads use it too while it is open, unless their thread has a block of its own."""
    if isinstance(result, (str, Path)):
        found = _from_path(result)
    else:
        key = _token(result.dumps(prune_errors=True).encode())
        found = _REGISTRY.setdefault(key, Applied(result, f"<AutotuningResult for {result.device_kind}>", key))
    _check_chip(found, "tuning.use")
    global _OPEN
    block = object()
    reset = _STACK.set(_STACK.get() + (found,))
    with _OPEN_LOCK:
        _OPEN = (*_OPEN, (block, found))
    try:
        with _entered(found):
            yield found
    finally:
        with _OPEN_LOCK:
            _OPEN = tuple(entry for entry in _OPEN if entry[0] is not block)
        _STACK.reset(reset)


@contextlib.contextmanager
def applied(token: str, what: str) -> Iterator[None]:
    """Traces the block with the result `token` names ("" for none): `what` names the op in errors."""
    if not token:
        yield
        return
    found = _REGISTRY.get(token)
    if found is None:
        raise AutotuningFileError(f"tokamax {what}: no autotuning result with token {token!r} was loaded in this "
                                  f"process (apply it with tokamax.tuning.use or {ENVIRONMENT_VARIABLE})")
    _check_chip(found, what)
    with _on_the_emulated_chip(), _entered(found):
        yield


@contextlib.contextmanager
def _on_the_emulated_chip() -> Iterator[None]:
    """On a CPU host tracing for an emulated chip (CPU tensors in interpret mode) with no mesh set, the
    chip's abstract mesh, so that upstream's Op looks the result up under that chip's device kind (it
    reads the kind from the arguments' devices, else the abstract mesh: JAX's CPU would match no entry)."""
    import jax

    chip = emulation.current_chip()
    if chip is None or jax.default_backend() == "tpu" or not jax.sharding.get_abstract_mesh().empty:
        yield
        return
    with jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
        yield
