"""`use_fused_loss(model)`: a causal LM computes its training loss with the fused loss, through its
own forward, and TRL's trainers run their fused LM head on the kernel for it.

transformers' causal LMs (Llama, Mixtral, Qwen3-MoE, GPT-OSS, Gemma 2 and the others built as
`model` + `lm_head`) end their forward with `logits = self.lm_head(hidden)`, maybe a scale or a soft
cap, and `loss = self.loss_function(logits, labels, vocab_size, **kwargs)`. While a training step
with labels runs, `lm_head` hands on its input as `LogitsToBe` (`logits`: it records the scale and
soft cap the forward applies) and `loss_function` is `causal_lm_loss` on it, `lm_head.weight` and
its bias; the rest of the family's forward (its trunk, `logits_to_keep`, MoE auxiliary losses) runs
as written, and the output holds no logits. So one wrapper serves every family, and nothing of a
family's forward is copied. Evaluation, generation and steps without labels run the forward
untouched (logits as before). Tied embeddings need nothing (the weight is shared). Under
transformers' tensor-parallel plan and FSDP2, `sharding` gives the loss the head's weight as it must
see it. TRL's fused head, which its trainers call instead of the labels path, is served through the
hooks of `integrations.trl` (and a reference model TRL loads from the same checkpoint, through
`integrations.trl.reference`).

The wrapper wraps the forward the model has: one set on the instance (TRL's fused head, from a
trainer built before; accelerate's autocast wrapper, from `prepare`) is kept inside it, so the
order of `use_fused_loss`, the trainer and `prepare` does not matter; a call with
`fused_lm_head=True` (TRL's) goes straight to it.

Options (Liger-Kernel's): z-loss, label smoothing, reduction ("mean", "sum", "none"): `LossOptions`;
they act on the labels path only, and TRL's fused-head calls of a model given them are refused.
Refused: a loss function other than transformers' `ForCausalLMLoss` (a custom `loss_function`,
another `loss_type`), and a forward that changes the logits otherwise before its loss function or
does not call it (each detected, with a message).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...trl import distill as trl_distill
from ...trl import hooks as trl_hooks
from ...trl import reference as trl_reference
from . import sharding
from .causal_lm import LossOptions, causal_lm_loss
from .logits import LogitsToBe

_LOSS_KEYWORDS = ("num_items_in_batch", "ignore_index", "shift_labels")


def _peft_base(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (its forward is the one that calls lm_head and the loss
    function; PEFT's forward calls it through `__call__`), or `model` itself."""
    peft = sys.modules.get("peft")
    if peft is not None and isinstance(model, peft.PeftModel):
        return model.get_base_model()
    return model


def _peft_layers() -> tuple[type, ...]:
    """PEFT's classes that stand in for a module it adapts (LoRA and the other tuners; modules_to_save)."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    return BaseTunerLayer, AuxiliaryTrainingWrapper


def _head(model: torch.nn.Module) -> torch.nn.Linear:
    name = type(model).__name__
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if "peft" in sys.modules and isinstance(head, _peft_layers()):
        raise NotImplementedError(
            f"tokamax use_fused_loss: {name}'s lm_head is PEFT's {type(head).__module__}.{type(head).__qualname__} "
            "(an adapter or modules_to_save on lm_head); the fused loss reads lm_head.weight and bias as they are and "
            "would leave the adapter out: keep adapters off lm_head (target_modules, modules_to_save)")
    if not isinstance(head, torch.nn.Linear):
        what = None if head is None else f"{type(head).__module__}.{type(head).__qualname__}"
        raise TypeError(f"tokamax use_fused_loss: {name} has no nn.Linear LM head (get_output_embeddings() gives "
                        f"{what}); the fused loss serves causal LMs built as model + lm_head")
    _check_loss_function(model)
    return head


def _check_loss_function(model: torch.nn.Module) -> None:
    """The model's loss is transformers' shifted causal-LM cross-entropy, the one loss this computes."""
    name = type(model).__name__
    if not hasattr(model, "loss_function"):
        raise TypeError(f"tokamax use_fused_loss: {name} has no loss_function to compute the loss with")
    from transformers.loss.loss_utils import ForCausalLMLoss

    given = model.loss_function
    if given is not ForCausalLMLoss:
        what = getattr(given, "__qualname__", type(given).__name__)
        loss_type = getattr(model, "loss_type", None)
        raise NotImplementedError(
            f"tokamax use_fused_loss: {name}'s loss_function is {what} (loss_type {loss_type!r}), "
            "not transformers' ForCausalLMLoss; the fused loss computes only that (the shifted causal-LM "
            "cross-entropy) and would silently replace it: keep the model's own loss (no use_fused_loss), or "
            "call tokamax.torch_ops.linear_softmax_cross_entropy_loss from your loss on the hidden states")


def _inner_forward(model: torch.nn.Module) -> Callable[..., Any]:
    """The forward the fused one wraps, as a function of the model (so that a copy, whose methods are rebound,
    runs its own): the one set on the instance (TRL's fused head, accelerate's autocast wrapper), else the
    class's."""
    own = model.__dict__.get("forward")
    if own is None:
        return type(model).forward
    if isinstance(own, types.MethodType) and own.__self__ is model:
        return own.__func__
    raise TypeError(f"tokamax use_fused_loss: {type(model).__name__}.forward is set on the instance as "
                    f"{type(own).__qualname__} {getattr(own, '__qualname__', '')}, not a method of the model, which "
                    "the fused loss cannot wrap and keep: call use_fused_loss before what set it (e.g. before "
                    "building the trainer, or accelerate's prepare)")


@contextlib.contextmanager
def _hidden_states_as_logits(model: torch.nn.Module, head: torch.nn.Linear,
                             options: LossOptions) -> Iterator[dict[str, Any]]:
    """Within the block, `head` returns its input as `LogitsToBe` and `model.loss_function` is the fused
    loss on it; yields a record of what the forward did (the hidden states, whether the loss ran)."""
    seen: dict[str, Any] = {}
    name = type(model).__name__

    def hand_through(hidden: torch.Tensor) -> LogitsToBe:
        seen["hidden"] = hidden
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else head.weight.dtype
        # what the head computes in, whatever the forward casts its logits to after (the kernels take bf16 and
        # float32: under float16 autocast they compute in the weight's dtype)
        seen["dtype"] = dtype if dtype in (torch.bfloat16, torch.float32) else head.weight.dtype
        return LogitsToBe(hidden, name, dtype=dtype)

    def fused_loss(logits: Any, labels: torch.Tensor | None, vocab_size: int | None = None,
                   **kwargs: Any) -> torch.Tensor:
        if not isinstance(logits, LogitsToBe) or logits.hidden is not seen.get("hidden"):
            raise RuntimeError(f"tokamax use_fused_loss: {name}.forward changes the logits between its lm_head and "
                               "its loss function; the fused loss cannot apply that change")
        seen["loss"] = True
        sharding.check_weight(name, head)
        return causal_lm_loss(logits.hidden, head.weight, labels, replicated_on=sharding.tensor_parallel_mesh(head),
                              transform=logits.transform, bias=head.bias, options=options, dtype=seen["dtype"],
                              **{k: kwargs[k] for k in _LOSS_KEYWORDS if k in kwargs})

    had_loss_function = "_loss_function" in model.__dict__
    previous = model.__dict__.get("_loss_function")
    # a forward set on the instance (transformers' tensor-parallel plan installs one) is put back after
    head_forward = head.__dict__.get("forward")
    head.forward = hand_through
    model.loss_function = fused_loss
    try:
        yield seen
    finally:
        if head_forward is None:
            del head.forward
        else:
            head.forward = head_forward
        if had_loss_function:
            model.loss_function = previous
        else:
            del model._loss_function


def use_fused_loss(model: torch.nn.Module, *, z_loss: float = 0.0, label_smoothing: float = 0.0,
                   reduction: str = "mean") -> torch.nn.Module:
    """Makes `model` (a transformers causal LM) compute its training loss with the fused loss, and TRL's
    fused LM head run on the kernel for it; returns it. Applies to this model object only (not its
    class); calling it again changes only the options. `z_loss`, `label_smoothing`, `reduction`: see
    `LossOptions` (the labels path only: TRL computes its own losses from the head's outputs, and its
    fused-head calls of a model given them are refused). Before or after a TRL trainer was built or
    accelerate prepared the model: the forward set on the instance is kept, inside.
    A PEFT model is served through its base model (`get_base_model()`) and returned as given."""
    given, model = model, _peft_base(model)
    _head(model)  # refused now if it cannot serve; looked up again at each step
    options = LossOptions(z_loss=z_loss, label_smoothing=label_smoothing, reduction=reduction)
    if getattr(model, "_tokamax_fused_loss", False):
        model._tokamax_loss_options = options
        return given
    forward = _inner_forward(model)
    model._tokamax_loss_options = options
    trl_hooks.attach(model)
    trl_reference.follow(model)
    trl_distill.serve(model)
    signature = inspect.signature(type(model).forward)

    @functools.wraps(type(model).forward)  # the class's signature, which Trainer and generate read
    def fused_forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("fused_lm_head"):  # TRL's fused head (set before use_fused_loss): TRL computes its own loss
            return forward(self, *args, **kwargs)
        labels = signature.bind_partial(self, *args, **kwargs).arguments.get("labels")
        if not self.training or labels is None:
            return forward(self, *args, **kwargs)
        as_tuple = kwargs.pop("return_dict", None) is False
        head = _head(self)  # at each call: a head resized, or adapted by PEFT, or a loss_function set since
        with sharding.weight_kept_gathered(self, head), \
                _hidden_states_as_logits(self, head, self._tokamax_loss_options) as seen:
            out = forward(self, *args, **kwargs, return_dict=True)
        if not seen.get("loss"):
            raise RuntimeError(f"tokamax use_fused_loss: {type(self).__name__}.forward computed its loss without "
                               "its loss_function; the fused loss cannot serve it")
        out["logits"] = None
        return out.to_tuple() if as_tuple else out

    model.forward = types.MethodType(fused_forward, model)
    model._tokamax_fused_loss = True
    return given
