"""Labels outside the vocabulary: the kernel compares each label with its columns, so a label in no
column (negative, or >= vocab) would give that row loss = lse without any error, on one chip and
across a split vocabulary alike. They are refused where reading the labels costs nothing (CPU
tensors: a ValueError naming the op, the argument and the values), and elsewhere (a TPU, where a
check would wait for the device) make their rows' losses NaN, so the step is visibly wrong instead
of silently so."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

__all__ = ["out_of_range", "poisoned"]


def out_of_range(op: str, labels: torch.Tensor, vocab: int, ignore_index: int | None) -> torch.Tensor:
    """bool [rows]: the labels that are neither in [0, vocab) nor `ignore_index`; raises ValueError
    if any is, where `labels` is a CPU tensor."""
    bad = (labels < 0) | (labels >= vocab)
    if ignore_index is not None:
        bad &= labels != ignore_index
    readable = labels.device.type == "cpu" and not torch.compiler.is_compiling() and not is_fake(labels)
    if readable and bool(bad.any()):
        values = sorted({int(v) for v in labels[bad][:8]})
        raise ValueError(f"tokamax {op}: labels must be in [0, {vocab}) or equal to ignore_index ({ignore_index}); "
                         f"got {int(bad.sum())} outside, e.g. {values}")
    return bad


def poisoned(losses: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """`losses` [rows] with the rows of out-of-range labels NaN."""
    return torch.where(bad, torch.full_like(losses, float("nan")), losses)
