"""Forward hooks on the models TRL's fused LM head serves on the kernel (`tokamax.use_fused_loss(model)`
puts them on the model, `reference` on a reference model TRL loads from its checkpoint), so that the
head knows which model it serves: TRL's patched forward runs inside the model's `__call__` (a trainer
calls `model(..., fused_lm_head=True)`; PEFT's wrapper and DDP call the same model), so a pre-hook
that sees `fused_lm_head=True` pushes the model on `dispatch.active` (and binds TRL's name, the first
time), and the post-hook pops it, also when the forward raises. Hooks travel with the model (a
`copy.deepcopy` for TRL's reference model keeps them).

The pre-hook refuses a model given loss options (`use_fused_loss(model, z_loss=...)`): they act on
transformers' loss only, and TRL computes its own loss from the head's log-probs."""

from __future__ import annotations

from typing import Any

import torch

from . import dispatch

_TOKENS = "_tokamax_trl_tokens"  # per module, one ContextVar token per fused forward still running


def _refuse_loss_options(module: torch.nn.Module) -> None:
    options = getattr(module, "_tokamax_loss_options", None)
    given = [] if options is None else options.given()
    if given:
        raise ValueError(
            f"tokamax use_fused_loss: {type(module).__name__} was given {', '.join(given)}, which act on "
            "transformers' loss (a forward with labels) only; TRL's trainers compute their own loss from the fused "
            "LM head's log-probs and would train without them: call tokamax.use_fused_loss(model) without them "
            "under TRL (SFT smooths labels with SFTConfig(label_smoothing_factor=...), on full logits)")


def _enter(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    if kwargs.get("fused_lm_head"):
        _refuse_loss_options(module)
        dispatch.install()
        module.__dict__.setdefault(_TOKENS, []).append(dispatch.active.set((*dispatch.active.get(), module)))


def _leave(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
    if kwargs.get("fused_lm_head") and module.__dict__.get(_TOKENS):
        dispatch.active.reset(module.__dict__[_TOKENS].pop())


def attach(model: torch.nn.Module) -> None:
    """Registers the two hooks on `model` (once): TRL's fused head then runs the kernel for it."""
    if getattr(model, dispatch.SERVED, False):
        return
    model.register_forward_pre_hook(_enter, with_kwargs=True)
    model.register_forward_hook(_leave, with_kwargs=True, always_call=True)
    setattr(model, dispatch.SERVED, True)
