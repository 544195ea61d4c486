"""Labels outside the vocabulary: the kernel compares each label with its columns, so a label in no
column (negative, or >= vocab) would give that row loss = lse without any error, on one chip and
across a split vocabulary alike. They are refused where reading the labels costs nothing (CPU
tensors: a ValueError naming the op, the argument and the values), and elsewhere (a TPU, where a
check would wait for the device) make their rows' losses NaN, so the step is visibly wrong instead
of silently so. `refuse` is the first half alone, for `lm_head_statistics`' targets (whose NaN rows
its JAX side makes, `tokamax.lm_head.targets`, which also words the refusal)."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

from ...lm_head.targets import message

__all__ = ["out_of_range", "poisoned", "refuse"]


def _outside(labels: torch.Tensor, vocab: int, ignore_index: int | None) -> torch.Tensor:
    bad = (labels < 0) | (labels >= vocab)
    return bad if ignore_index is None else bad & (labels != ignore_index)


def _readable(labels: torch.Tensor) -> bool:
    """Reading the values waits for nothing: a CPU tensor, outside a compiled graph, not fake."""
    return labels.device.type == "cpu" and not torch.compiler.is_compiling() and not is_fake(labels)


def _raise_if_any(op: str, name: str, labels: torch.Tensor, bad: torch.Tensor, vocab: int,
                  ignore_index: int | None) -> None:
    if bool(bad.any()):
        values = sorted({int(v) for v in labels[bad][:8]})
        raise ValueError(message(op, name, vocab, ignore_index, int(bad.sum()), values))


def out_of_range(op: str, labels: torch.Tensor, vocab: int, ignore_index: int | None) -> torch.Tensor:
    """bool [rows]: the labels that are neither in [0, vocab) nor `ignore_index`; raises ValueError
    if any is, where `labels` is a CPU tensor."""
    bad = _outside(labels, vocab, ignore_index)
    if _readable(labels):
        _raise_if_any(op, "labels", labels, bad, vocab, ignore_index)
    return bad


def refuse(op: str, name: str, values: torch.Tensor, vocab: int, weights: torch.Tensor | None = None) -> None:
    """Raise ValueError naming the op, `name` and the values if any of `values` is outside [0, vocab),
    where they are a CPU tensor; elsewhere nothing (no op is traced). `weights`: only the values whose
    weight is > 0 are checked (the others are never read)."""
    if _readable(values):
        bad = _outside(values, vocab, None)
        _raise_if_any(op, name, values, bad if weights is None else bad & (weights > 0), vocab, None)


def poisoned(losses: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """`losses` [rows] with the rows of out-of-range labels NaN."""
    return torch.where(bad, torch.full_like(losses, float("nan")), losses)
