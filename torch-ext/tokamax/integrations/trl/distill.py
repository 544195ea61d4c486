"""Which function TRL's `DistillationTrainer` computes its divergence with, student by student, without
editing TRL.

TRL 1.16's trainer computes its loss in `_chunked_divergence_loss(student_hidden, teacher_hidden,
student_lm_head.weight, teacher_lm_head.weight, ...)`, which calls `ChunkedDivergenceFunction.apply(...)`;
both are names of `trl.trainer.distillation_trainer` looked up at each call. `install()` binds the first
to a wrapper that looks, at each call, whether the student's head weight is the weight of a head `serve(model)`
registered (`use_fused_loss(student)`; the head module, not its weight, is kept: FSDP2 and accelerate may swap the
parameter, never the module). For such a student the wrapper computes the loss itself
(`distill_loss.chunked_divergence_loss`: TRL's contract, the loss's gradients made in the forward by the fused
scheme), where the kernel can serve the call; otherwise it runs TRL's function, noting for the call's duration
whether the student is served, and the second name is bound to `Dispatcher`, which runs
`divergence.chunked_divergence` inside such a call and TRL's own function otherwise: every other student, and
every call the kernel cannot serve, which says why once (`warnings.warn`). The teacher needs nothing: any teacher
with the student's vocabulary is served with it. A TRL whose function or loss has another signature is left
alone, with a warning.

Where `trl.trainer.distillation_trainer` is not imported yet, `serve` puts a forward pre-hook on the model
that binds the names at its first forward after that import (the student generates its completions before
the first loss) and then removes itself.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import warnings
import weakref
from typing import Any

import torch

from . import distill_loss, divergence

MODULE = "trl.trainer.distillation_trainer"
FUNCTION = "ChunkedDivergenceFunction"
LOSS = "_chunked_divergence_loss"
# TRL 1.16's ChunkedDivergenceFunction.forward(ctx, ...) and _chunked_divergence_loss(...)
PARAMETERS = ("ctx", "student_hidden", "student_weight", "student_bias", "teacher_hidden", "teacher_weight",
              "teacher_bias", "beta", "temperature", "student_logit_scale", "student_final_logit_softcapping",
              "teacher_logit_scale", "teacher_final_logit_softcapping")
LOSS_WEIGHT = "student_lm_head_weight"
LOSS_PARAMETERS = tuple(inspect.signature(distill_loss.chunked_divergence_loss).parameters)
"""TRL 1.16's `_chunked_divergence_loss` parameters: a loss with others keeps TRL's own code around the per-token
function (`Dispatcher`)."""

heads: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
"""The output embeddings of the students `serve` registered."""
serving: contextvars.ContextVar[bool] = contextvars.ContextVar("tokamax_trl_distill", default=False)
"""Whether the loss running is a served student's."""
calls = {"kernel": 0, "trl": 0}
"""How many divergence calls each side served (read by tests and the benchmark probe)."""
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


class Dispatcher:
    """Stands where TRL looks up `ChunkedDivergenceFunction`; `original` is TRL's own."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def apply(self, *args: Any) -> Any:
        if not serving.get():
            calls["trl"] += 1
            return self.original.apply(*args)
        reason = divergence.unsupported(*args)
        if reason is not None:
            _warn_once(f"tokamax use_fused_loss: DistillationTrainer's divergence runs TRL's own function: {reason}")
            calls["trl"] += 1
            return self.original.apply(*args)
        calls["kernel"] += 1
        return divergence.chunked_divergence(*args)

    def __getattr__(self, name: str) -> Any:  # anything else TRL might read of the Function
        return getattr(self.original, name)


def _served_call(bound: inspect.BoundArguments) -> str | None:
    """Why the kernel cannot serve this loss's divergence (`divergence.unsupported` on the arguments the loss hands
    `ChunkedDivergenceFunction`), or None."""
    a = bound.arguments
    return divergence.unsupported(
        a["student_hidden_states"].reshape(-1, a["student_hidden_states"].size(-1)), a["student_lm_head_weight"],
        a.get("student_lm_head_bias"), a["teacher_hidden_states"].reshape(-1, a["teacher_hidden_states"].size(-1)),
        a["teacher_lm_head_weight"], a.get("teacher_lm_head_bias"), a["beta"], a.get("temperature", 1.0),
        a.get("student_logit_scale", 1.0), a.get("student_final_logit_softcapping"),
        a.get("teacher_logit_scale", 1.0), a.get("teacher_final_logit_softcapping"))


def _noting(original: Any) -> Any:
    signature = inspect.signature(original)
    position = list(signature.parameters).index(LOSS_WEIGHT)
    takes_over = tuple(signature.parameters) == LOSS_PARAMETERS

    @functools.wraps(original)
    def chunked_divergence_loss(*args: Any, **kwargs: Any) -> Any:
        weight = kwargs[LOSS_WEIGHT] if LOSS_WEIGHT in kwargs else args[position]
        served = any(head.weight is weight for head in list(heads))
        if served and takes_over:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if _served_call(bound) is None:
                calls["kernel"] += 1
                return distill_loss.chunked_divergence_loss(**bound.arguments)
        token = serving.set(served)  # the Dispatcher says why, once, and runs TRL's function
        try:
            return original(*args, **kwargs)
        finally:
            serving.reset(token)

    chunked_divergence_loss._tokamax_original = original
    return chunked_divergence_loss


def install() -> bool:
    """Binds TRL's two names (once; nothing if the trainer's module is not imported). False, with a
    warning, where TRL's function or loss is not the one this was written for."""
    module = sys.modules.get(MODULE)
    if module is None or not hasattr(module, FUNCTION) or not hasattr(module, LOSS):
        return False
    function, loss = getattr(module, FUNCTION), getattr(module, LOSS)
    if isinstance(function, Dispatcher) and hasattr(loss, "_tokamax_original"):
        return True
    names = tuple(inspect.signature(getattr(function, "original", function).forward).parameters)
    loss_names = tuple(inspect.signature(getattr(loss, "_tokamax_original", loss)).parameters)
    if names != PARAMETERS or LOSS_WEIGHT not in loss_names:
        _warn_once(f"tokamax use_fused_loss: {MODULE}.{FUNCTION}.forward takes {names}, not TRL 1.16's "
                   f"{PARAMETERS} (or {LOSS} takes no {LOSS_WEIGHT}); DistillationTrainer runs TRL's own function")
        return False
    if not isinstance(function, Dispatcher):
        setattr(module, FUNCTION, Dispatcher(function))
    if not hasattr(loss, "_tokamax_original"):
        setattr(module, LOSS, _noting(loss))
    return True


def _install_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Binds the names at a forward of the student; once bound, the hook removes itself. Nothing while
    torch.compile traces the model (transformers compiles decode steps): a later eager call binds them."""
    if torch.compiler.is_compiling():
        return
    if install():
        for key in [k for k, hook in module._forward_pre_hooks.items() if hook is _install_hook]:
            del module._forward_pre_hooks[key]
            module._forward_pre_hooks_with_kwargs.pop(key, None)


def serve(model: torch.nn.Module) -> None:
    """Registers `model`'s output embeddings as a student's head: DistillationTrainer's divergence for that
    student runs the kernel."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        return
    heads.add(head)
    if not install() and _install_hook not in model._forward_pre_hooks.values():
        model.register_forward_pre_hook(_install_hook, with_kwargs=True)
