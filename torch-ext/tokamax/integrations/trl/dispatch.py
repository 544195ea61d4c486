"""Which function TRL's fused LM head runs, model by model, without editing TRL.

TRL 1.16's `add_fused_lm_head` replaces a model's forward with one that calls
`trl.trainer.utils._ChunkedLogProbFunction.apply(...)`, a name it looks up at each call. `install()`
binds that name to `Dispatcher`, which runs `head.chunked_log_probs` while a model that
`hooks.attach` marked (`use_fused_loss`'s model, a reference model `reference` follows) is the
innermost model in a fused forward (`hooks` keeps that stack), and TRL's own function otherwise:
every other model, and every call the kernel cannot serve, which says why once (`warnings.warn`,
naming the reason). Where `reference` knows that a reference model TRL loaded itself was patched
beyond its reach (`missed`), a call for an unmarked model says so once. A TRL whose function has
another signature is left alone, with a warning: its head then runs TRL's own code.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
import warnings
from typing import Any

from . import head

MODULE = "trl.trainer.utils"
NAME = "_ChunkedLogProbFunction"
# TRL 1.16's ChunkedLogProbFunction.forward(ctx, ...)
PARAMETERS = ("ctx", "hidden", "weight", "bias", "targets", "temperature", "chunk_size", "final_logit_softcapping",
              "logit_scale", "outputs")

active: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("tokamax_trl_models", default=())
"""The models whose fused forward is running, innermost last."""
SERVED = "_tokamax_trl_hooks"
"""The attribute `hooks.attach` sets on a model it serves."""
_warned: set[str] = set()
calls = {"kernel": 0, "trl": 0}
"""How many fused-head calls each side served (read by tests and the benchmark probe)."""
missed: str | None = None
"""Why a reference model TRL loaded itself may run TRL's own function (set by `reference`), or None."""


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


class Dispatcher:
    """Stands where TRL looks up its fused-head function; `original` is TRL's own."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def apply(self, hidden: Any, weight: Any, bias: Any, targets: Any, *args: Any) -> Any:
        models = active.get()
        if not models or not getattr(models[-1], SERVED, False):
            if missed is not None:
                _warn_once(f"tokamax use_fused_loss: TRL's fused LM head runs TRL's own function for a model "
                           f"use_fused_loss was not called on: {missed}, so a reference model the trainer loaded "
                           "itself (DPO and KTO without ref_model, GRPO and RLOO with beta > 0) is not served; call "
                           "use_fused_loss before building the trainer, with trl imported, or pass "
                           "ref_model=copy.deepcopy(model) after it")
            calls["trl"] += 1
            return self.original.apply(hidden, weight, bias, targets, *args)
        reason = head.unsupported(hidden, weight, bias)
        if reason is not None:
            _warn_once(f"tokamax use_fused_loss: TRL's fused LM head runs TRL's own function for "
                       f"{type(models[-1]).__name__}: {reason}")
            calls["trl"] += 1
            return self.original.apply(hidden, weight, bias, targets, *args)
        calls["kernel"] += 1
        return head.chunked_log_probs(hidden, weight, bias, targets, *args)

    def __getattr__(self, name: str) -> Any:  # anything else TRL might read of the Function
        return getattr(self.original, name)


def install() -> bool:
    """Binds TRL's name to a `Dispatcher` (once; nothing if TRL is not imported). False, with a
    warning, where TRL's function is not the one this was written for."""
    module = sys.modules.get(MODULE)
    if module is None or not hasattr(module, NAME):
        return False
    current = getattr(module, NAME)
    if isinstance(current, Dispatcher):
        return True
    names = tuple(inspect.signature(current.forward).parameters)
    if names != PARAMETERS:
        _warn_once(f"tokamax use_fused_loss: {MODULE}.{NAME}.forward takes {names}, not TRL 1.16's {PARAMETERS}; "
                   "TRL's fused LM head runs TRL's own function")
        return False
    setattr(module, NAME, Dispatcher(current))
    return True
