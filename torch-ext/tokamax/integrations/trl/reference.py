"""Reference models TRL loads itself, served like the policy.

Given no `ref_model`, TRL 1.16's DPO and KTO trainers (and GRPO and RLOO with `beta > 0`) load one
from the policy's checkpoint (`create_model_from_path(config._name_or_path)`) and give it to
`trl.trainer.utils.add_fused_lm_head`, the one function every model TRL trains or scores passes
through. `follow(model)` (called by `use_fused_loss`) notes the model's checkpoint and wraps that
function where TRL's trainers look it up (`trl.trainer.utils` and each `trl` module that imported it
by name; a trainer module imported later takes the wrapper): a model it patches whose checkpoint is
one `use_fused_loss` was called on gets the hooks, so its head runs the kernel.

What it cannot reach it says (`dispatch.missed`, warned at the unserved model's first call): TRL
patched the model before `use_fused_loss` (the trainer built first), or TRL was not imported yet
(the trainers' modules then bind TRL's own function).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

import torch

from . import dispatch, hooks

MODULE = "trl.trainer.utils"
NAME = "add_fused_lm_head"
TRL_FORWARD = "add_fused_lm_head.<locals>._fused_forward"  # the code of the forward TRL sets on a model
checkpoints: set[str] = set()
"""The checkpoints (`config._name_or_path`) of the models `use_fused_loss` was called on."""


def _checkpoint(model: torch.nn.Module) -> str:
    return getattr(getattr(model, "config", None), "_name_or_path", "") or ""


def _watching(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_fused_lm_head(model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        result = original(model, *args, **kwargs)
        if _checkpoint(model) in checkpoints:
            hooks.attach(model)
        return result

    add_fused_lm_head._tokamax_original = original
    return add_fused_lm_head


def watch() -> bool:
    """Wraps TRL's `add_fused_lm_head` wherever TRL's modules hold it (once); False if TRL is not imported."""
    if "trl" not in sys.modules:
        return False
    module = importlib.import_module(MODULE)
    current = module.__dict__.get(NAME)
    if current is None:
        return False
    original = getattr(current, "_tokamax_original", current)
    wrapper = current if current is not original else _watching(original)
    for name, loaded in list(sys.modules.items()):
        if (name == "trl" or name.startswith("trl.")) and getattr(loaded, "__dict__", {}).get(NAME) is original:
            setattr(loaded, NAME, wrapper)
    return True


def _patched_by_trl(model: torch.nn.Module) -> bool:
    """Whether the forward set on the model is TRL's fused one (maybe under accelerate's wrappers)."""
    fn = model.__dict__.get("forward")
    for _ in range(16):
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_qualname == TRL_FORWARD:
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


def follow(model: torch.nn.Module) -> None:
    """A model TRL patches from `model`'s checkpoint from now on is served; what cannot be, is noted."""
    checkpoint = _checkpoint(model)
    if not checkpoint:  # no path TRL could load a reference model from
        watch()
        return
    checkpoints.add(checkpoint)
    name = type(model).__name__
    if _patched_by_trl(model):
        dispatch.install()  # the reference model's calls then meet the dispatcher, which says it
        dispatch.missed = f"{name} was given to use_fused_loss after TRL had patched it (the trainer built first)"
        watch()
    elif not watch():
        dispatch.missed = f"TRL was not imported when use_fused_loss({name}) ran"
