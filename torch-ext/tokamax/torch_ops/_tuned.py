"""Every Torch op here takes the applied autotuning result (`tokamax.tuning`: a `use` block, or the
file `TOKAMAX_AUTOTUNING_RESULT` names), without each op writing it out.

`register` gives the JAX function one more static argument, `autotuning: str` (the result's token,
"" for none), traced inside the function's chip context with `tuning.applied(token)`, so that
upstream's Op finds the result's configs, and a result for another chip is refused at the export,
naming both; torch-tpu keys its export on it, so a different result makes a different export. The
custom op comes back as a `TunedOp`, which appends the current token to every call, so callers,
fake kernels and autograd functions keep the op's own signature: the fake and the setup drop it,
the backward runs its ops with the forward's token (an autograd Function of our own does the same
with `keep_token` / `backward_token`). Ops whose JAX function names an `autotuning`
argument itself (the ragged-dot ops) and meshed ops keep theirs as written. Each op notes its JAX
function and its calls in `tuning.recorded`, where `tokamax.tuning.tune` reads them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import torch

from ..tuning import active as tuning
from ..tuning import recorded

PARAMETER = "autotuning"
_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar("tokamax_forced_token", default=None)


@torch.compiler.assume_constant_result
def current_token() -> str:
    """The applied autotuning result's token (`tokamax.tuning.token`), or the forward's inside its
    backward. torch.compile takes it as a constant of the compiled graph: the result applied when a
    function is compiled stays with it."""
    forced = _FORCED.get()
    return tuning.token() if forced is None else forced


@contextlib.contextmanager
def forced(token: str) -> Iterator[None]:
    """Within the block, ops take `token` (a backward, its forward's result)."""
    reset = _FORCED.set(token)
    try:
        yield
    finally:
        _FORCED.reset(reset)


def keep_token(ctx: Any) -> None:
    """In a `torch.autograd.Function`'s forward whose backward calls ops: the token the forward runs under,
    for `backward_token` (a custom op's autograd made by `register` does this itself)."""
    ctx.tokamax_autotuning = current_token()


def backward_token(ctx: Any) -> contextlib.AbstractContextManager[None]:
    """In that Function's backward: its ops take the forward's token, wherever and whenever it runs."""
    return forced(ctx.tokamax_autotuning)


def takes_token(fn: Callable[..., Any]) -> bool:
    return PARAMETER in inspect.signature(inspect.unwrap(fn)).parameters


def with_token(name: str, jax_fn: Callable[..., Any], chip_context: Callable[..., Any]) -> Callable[..., Any]:
    """`jax_fn` with a trailing static `autotuning: str`, traced under `tuning.applied` inside the chip
    context (`chip_for_tracing` with the function's pinned chip). The signature is set explicitly (no
    `__wrapped__`): torch-tpu's `jax_op` reads the signature of the function it is given, unwrapped."""
    original = inspect.signature(inspect.unwrap(jax_fn), eval_str=True)
    parameter = inspect.Parameter(PARAMETER, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)
    signature = original.replace(parameters=[*original.parameters.values(), parameter])

    def body(*args: Any) -> Any:
        *rest, token = args
        with tuning.applied(token, name):
            return jax_fn(*rest)

    body.__name__ = body.__qualname__ = name  # what the chip context's refusals name ("tokamax deepseek_rope: ...")

    # the same checks as `jax_fn`'s own block: this block opens first, and the attached chip it emulates is then the
    # enclosing block's, for which `jax_fn`'s block checks nothing (proj_and_save_state reached the v5e's Mosaic)
    upstream, op = getattr(jax_fn, "upstream_check", (None, None))
    in_chip = chip_context(getattr(jax_fn, "pinned_chip", None), upstream=upstream, op=op)(body)

    def fn(*args: Any) -> Any:
        return in_chip(*args)

    fn.__signature__ = signature
    fn.__name__ = fn.__qualname__ = getattr(jax_fn, "__name__", name)
    fn.__doc__ = jax_fn.__doc__
    fn.pinned_chip = getattr(jax_fn, "pinned_chip", None)
    fn.upstream_check = (upstream, op)
    return fn


def _spec(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        import jax.numpy as jnp

        dtype = jnp.bfloat16 if arg.dtype == torch.bfloat16 else str(arg.dtype).removeprefix("torch.")
        return jax.ShapeDtypeStruct(tuple(int(d) for d in arg.shape), jnp.dtype(dtype))
    return arg


def _record(name: str, jax_fn: Callable[..., Any], args: tuple) -> None:
    if any(type(a).__name__ == "DTensor" for a in args):  # its local calls happen below DTensor's dispatch
        return
    seen = (name, tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args[:-1]))
    recorded.add(seen, lambda: recorded.Call(name, jax_fn, (*(_spec(a) for a in args[:-1]), "")))


class TunedOp:
    """A custom op whose last argument is the autotuning token: called without it (it is appended),
    unless its JAX function names it (`appends` False; its callers pass it). Its calls are recorded
    inside `recording()` blocks."""

    def __init__(self, op: Any, name: str, jax_fn: Callable[..., Any], appends: bool = True) -> None:
        self._op, self._name, self._jax_fn, self._appends = op, name, jax_fn, appends
        recorded.register(name, jax_fn)

    def __call__(self, *args: Any) -> Any:
        if self._appends:
            args = (*args, current_token())
        if recorded.open_recordings():
            _record(self._name, self._jax_fn, args)
        return self._op(*args)

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not self._appends:
            return self._op.register_fake(fn)
        @functools.wraps(fn)
        def fake(*args: Any) -> Any:
            return fn(*args[:-1])

        self._op.register_fake(fake)
        return fn

    def register_autograd(self, backward: Callable[..., Any], *, setup_context: Callable[..., Any]) -> None:
        if not self._appends:
            self._op.register_autograd(backward, setup_context=setup_context)
            return

        def setup(ctx: Any, inputs: tuple, output: Any) -> None:
            ctx.tokamax_autotuning = inputs[-1]
            setup_context(ctx, inputs[:-1], output)

        def run_backward(ctx: Any, *grads: Any) -> tuple:
            with forced(ctx.tokamax_autotuning):
                out = backward(ctx, *grads)
            return (*out, None)

        self._op.register_autograd(run_backward, setup_context=setup)

    def __getattr__(self, name: str) -> Any:  # _opoverload, _qualname, _init_fn, register_kernel, ...
        return getattr(self._op, name)
