"""transformers' `ForCausalLMLoss`, computed from hidden states and the LM head's weight: the same
label shift, `ignore_index`, `shift_labels` and reductions (`num_items_in_batch`: the sum over the
labels kept, divided by it; else their mean, NaN when every label is ignored, as torch's
cross_entropy), with the logits never formed.

Plain cross-entropy of the raw logits runs upstream's linear softmax cross-entropy (the Torch op
`linear_softmax_cross_entropy_loss`). With a logit transform (a soft cap, a scale), a bias, z-loss or
label smoothing it runs our LM-head kernels (`lm_head_statistics`), per token:
(1 - label_smoothing) (lse - z[label]) + label_smoothing (lse - mean_j z_j) + z_loss lse^2, the
definitions of torch's `cross_entropy(label_smoothing=...)` and of Liger's / PaLM's z-loss.

Numerics: transformers rounds the logits to the model's dtype before upcasting them to float32;
here they stay in the kernels' float32 accumulators, so bf16 models see a slightly more exact loss.
The head is computed in the dtype transformers' own head would compute in: autocast's where it is
on (float32 weights under `Trainer(bf16=True)` run the bf16 kernels, the weight cast once per call),
else the weight's.

Training (a gradient wanted, the loss summed or averaged) computes the gradients in the forward
(`torch_ops.lm_head_cross_entropy`, `tokamax.lm_head.fused`): Liger's three-matmul scheme where its
temporaries fit the chip and it is faster than the kernels, else our kernels (with options) or
upstream's (the plain cross-entropy); the backward only scales them.

Rows are padded to `tokamax.splash.bucket` sizes (ignored positions, dropped after), as on TRL's
path: with dynamic padding every batch has its own token count, and torch-tpu exports one program
per distinct shape, so the buckets bound the exports of a training run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from .... import splash, torch_ops
from ....lm_head import IDENTITY, LogitTransform
from ....torch_ops.linear_softmax_cross_entropy.labels import out_of_range, poisoned

REDUCTIONS = ("mean", "sum", "none")


@dataclasses.dataclass(frozen=True)
class LossOptions:
    """What `use_fused_loss` adds to the cross-entropy (Liger-Kernel's options): `z_loss` (the weight
    of lse^2 per token), `label_smoothing` (in [0, 1)), `reduction` ("mean": transformers' own, the sum
    over `num_items_in_batch` where given; "sum"; "none": a loss per label position, 0 where ignored,
    shaped as the shifted labels, each with its own gradient)."""

    z_loss: float = 0.0
    label_smoothing: float = 0.0
    reduction: str = "mean"

    def __post_init__(self) -> None:
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"tokamax use_fused_loss: reduction must be one of {list(REDUCTIONS)}, got "
                             f"{self.reduction!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"tokamax use_fused_loss: label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.z_loss < 0:
            raise ValueError(f"tokamax use_fused_loss: z_loss must be >= 0, got {self.z_loss}")

    @property
    def plain(self) -> bool:
        return not self.z_loss and not self.label_smoothing

    def given(self) -> list[str]:
        """The options set away from their defaults, as `name=value` (for messages)."""
        return [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default]


def _shifted(labels: torch.Tensor | None, shift_labels: torch.Tensor | None, ignore_index: int) -> torch.Tensor:
    if shift_labels is not None:
        return shift_labels
    if labels is None:
        raise ValueError("tokamax fused loss: labels or shift_labels are needed")
    return F.pad(labels, (0, 1), value=ignore_index)[..., 1:]


def _token_losses(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                  transform: LogitTransform, options: LossOptions, ignore_index: int) -> torch.Tensor:
    """float32 [rows] of the options' loss (our kernels), 0 where ignored, NaN where a label is outside the
    vocabulary (and refused on CPU tensors)."""
    vocab = weight.shape[0]
    bad = out_of_range("use_fused_loss", targets, vocab, ignore_index)
    valid = (targets != ignore_index) & ~bad
    scale = transform.pre * transform.post
    cap = transform.post if transform.tanh else None
    stats = torch_ops.lm_head_statistics(x, weight, bias, torch.where(valid, targets, 0), logit_scale=scale,
                                         soft_cap=cap)
    eps = options.label_smoothing
    nll = stats.lse - stats.target_logit
    losses = (1.0 - eps) * nll
    if eps:
        losses = losses + eps * (stats.lse - stats.sum_logits / vocab)
    if options.z_loss:
        losses = losses + options.z_loss * stats.lse.square()
    return poisoned(torch.where(valid, losses, 0.0), bad)


def causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor | None, *,
                   num_items_in_batch: torch.Tensor | int | None = None, ignore_index: int = -100,
                   shift_labels: torch.Tensor | None = None, replicated_on: Any = None,
                   transform: LogitTransform = IDENTITY, bias: torch.Tensor | None = None,
                   options: LossOptions | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """float32 loss of next-token prediction: `hidden` [..., hidden] (the positions the model kept),
    `weight` the LM head's [vocab, hidden] (and its `bias`), the logits `transform(hidden @ weight.T +
    bias)`, `labels` [...] (shifted here) or `shift_labels` (already shifted; then `labels` is not read).
    `replicated_on`: the device mesh of a tensor-parallel head (its weight a DTensor split over the
    vocabulary), over which every rank holds the same hidden states and labels; they enter the loss as
    replicated DTensors on it, the loss comes back plain. `dtype`: what the head computes in (default the
    weight's; the fused forward passes autocast's where it is on)."""
    options = LossOptions() if options is None else options
    shift_labels = _shifted(labels, shift_labels, ignore_index)
    dtype = weight.dtype if dtype is None else dtype
    x = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
    weight = weight.to(dtype)
    targets = shift_labels.reshape(-1).to(device=x.device, dtype=torch.int32)
    if targets.shape[0] != x.shape[0]:
        raise ValueError(f"tokamax fused loss: {targets.shape[0]} label positions for {x.shape[0]} hidden states "
                         "(with logits_to_keep, pass shift_labels for the positions kept)")
    rows = x.shape[0]
    padding = (splash.bucket(rows) if rows else 0) - rows
    x, targets = F.pad(x, (0, 0, 0, padding)), F.pad(targets, (0, padding), value=ignore_index)
    upstream = transform.identity and bias is None and options.plain
    fused = _fused_chunk(x, weight, bias, options, replicated_on, upstream, transform.tanh)
    if fused is not None:
        total = _fused_total(x, weight, bias, targets, transform, options, ignore_index, fused)
        return _reduced(total, options, num_items_in_batch, targets, ignore_index)
    if replicated_on is not None:
        if not upstream:
            raise NotImplementedError("tokamax use_fused_loss: under tensor parallelism the loss is the plain "
                                      "cross-entropy of the raw logits; a soft cap, a logit scale, a bias, z-loss and "
                                      "label smoothing are not vocabulary-parallel")
        from torch.distributed.tensor import DTensor, Replicate

        x, targets = (DTensor.from_local(t, replicated_on, [Replicate()], run_check=False) for t in (x, targets))
    if upstream:
        reduction = "none" if options.reduction == "none" else "sum"
        out, _ = torch_ops.linear_softmax_cross_entropy_loss(x, targets, weight.t(), reduction=reduction,
                                                             ignore_index=ignore_index)
        if replicated_on is not None:
            out = out.to_local()
        losses, total = (out[:rows], None) if reduction == "none" else (None, out)
    else:
        losses = _token_losses(x, weight, bias, targets, transform, options, ignore_index)[:rows]
        total = losses.sum()
    if options.reduction == "none":
        return losses.reshape(shift_labels.shape)
    if replicated_on is not None:
        targets = targets.to_local()
    return _reduced(total, options, num_items_in_batch, targets, ignore_index)


def _reduced(total: torch.Tensor, options: LossOptions, num_items_in_batch: torch.Tensor | int | None,
             targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The summed loss as `options.reduction` and transformers reduce it."""
    if options.reduction == "sum":
        return total
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(total.device)
        return total / num_items_in_batch
    return total / (targets != ignore_index).sum()


def _fused_chunk(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, options: LossOptions,
                 replicated_on: Any, upstream: bool, soft_cap: bool = False) -> int | None:
    """The chunk of the fused forward-backward (`torch_ops.lm_head_cross_entropy`; 0: our kernels), or None
    for the loss-only paths: no gradient wanted (evaluation), a loss per position (`reduction="none"`),
    a tensor-parallel head, or the plain cross-entropy of a head that needs its gradient where the chunked
    scheme does not fit the chip or is slower (upstream's kernel: one matmul forward, three backward; a
    frozen head takes our kernels: one forward, one for dx)."""
    wanted = x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    if not torch.is_grad_enabled() or not wanted or options.reduction == "none" or replicated_on is not None:
        return None
    weight_grad = weight.requires_grad or (bias is not None and bias.requires_grad)
    chunk = torch_ops.loss_chunk(x.shape[0], x.shape[1], weight.shape[0], x.dtype, weight_grad, soft_cap)
    return None if upstream and not chunk and weight_grad else chunk


def _fused_total(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                 transform: LogitTransform, options: LossOptions, ignore_index: int, chunk: int) -> torch.Tensor:
    """float32 [] the options' loss summed over the kept labels, its gradients from the forward; NaN where a
    label is outside the vocabulary (refused on CPU tensors)."""
    bad = out_of_range("use_fused_loss", targets, weight.shape[0], ignore_index)
    valid = (targets != ignore_index) & ~bad
    total = torch_ops.lm_head_cross_entropy(x, weight, bias, torch.where(valid, targets, 0), valid, transform,
                                            z_loss=options.z_loss, smoothing=options.label_smoothing, chunk=chunk)
    return torch.where(bad.any(), torch.full_like(total, float("nan")), total)
