"""What a training forward's `lm_head` hands on under the fused loss: `LogitsToBe`, the hidden states
standing for the logits they would become, recording the elementwise steps the family's forward
applies to its logits before its loss function, so that the loss computes exactly those logits
without forming them.

transformers' causal LMs apply at most: a scale (Cohere's `logits * logit_scale`, Granite's
`logits / logits_scaling`, Falcon-H1's `* lm_head_multiplier`) and a soft cap (Gemma 2 and 3:
`logits / c`, `torch.tanh`, `logits * c`). Products and quotients by numbers, `torch.tanh` (once) and
casts to float32 are recorded; anything else done to them (indexing, adding a tensor, a second
tanh, ...) raises, naming the operation, since the fused loss could not apply it. It is a
Tensor-like object (`__torch_function__`), not a tensor: no operation can run on it unseen. It
answers `dtype` (what `lm_head` would have given: autocast's dtype, else the weight's; float32 once
cast), which wrappers that walk a forward's output read (accelerate's `convert_outputs_to_fp32`
casts bf16 and fp16 fields to float32).
"""

from __future__ import annotations

from typing import Any

import torch

from ....lm_head import LogitTransform


class LogitsToBe:
    """The logits `transform(hidden @ weight.T)` of an LM head, not yet computed."""

    def __init__(self, hidden: torch.Tensor, model: str, pre: float = 1.0, tanh: bool = False,
                 post: float = 1.0, dtype: torch.dtype | None = None) -> None:
        self.hidden, self.model = hidden, model
        self.pre, self.tanh, self.post = pre, tanh, post
        self.dtype = hidden.dtype if dtype is None else dtype

    def _with(self, pre: float, tanh: bool, post: float, dtype: torch.dtype | None = None) -> LogitsToBe:
        return LogitsToBe(self.hidden, self.model, pre, tanh, post, self.dtype if dtype is None else dtype)

    @property
    def transform(self) -> LogitTransform:
        return LogitTransform(self.pre, self.tanh, self.post)

    def _refuse(self, what: str) -> RuntimeError:
        return RuntimeError(f"tokamax use_fused_loss: {self.model}.forward applies {what} to the logits between its "
                            "lm_head and its loss function; the fused loss applies a scale and a soft cap "
                            "(x / c, tanh, x * c) only")

    def _number(self, factor: Any, what: str) -> float:
        if isinstance(factor, torch.Tensor) and factor.numel() == 1 and not factor.requires_grad:
            factor = factor.item()
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor:
            raise self._refuse(f"{what} by {factor if isinstance(factor, (int, float)) else type(factor).__name__}")
        return float(factor)

    def _scaled(self, factor: float) -> LogitsToBe:
        if self.tanh:
            return self._with(self.pre, True, self.post * factor)
        return self._with(self.pre * factor, False, self.post)

    def __mul__(self, other: Any) -> LogitsToBe:
        return self._scaled(self._number(other, "a product"))

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> LogitsToBe:
        return self._scaled(1.0 / self._number(other, "a quotient"))

    def float(self) -> LogitsToBe:  # the loss is float32 anyway
        return self._with(self.pre, self.tanh, self.post, torch.float32)

    def __getattr__(self, name: str) -> Any:
        raise self._refuse(f"`.{name}`")

    def __getitem__(self, index: Any) -> Any:
        raise self._refuse("indexing")

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        me = next(a for a in args if isinstance(a, LogitsToBe))
        if func in (torch.tanh, torch.Tensor.tanh) and not me.tanh and len(args) == 1 and not kwargs:
            return me._with(me.pre * me.post, True, 1.0)
        if func in (torch.Tensor.float, torch.Tensor.to) and all(a in (torch.float32,) for a in args[1:]) \
                and all(v in (torch.float32,) for v in kwargs.values()):
            return me.float()
        raise me._refuse(f"{getattr(func, '__name__', func)}")
