"""The aten ops torch-tpu 0.2.0 lacks that a trainer calls, given to its dispatch key ("PrivateUse1") in ops it has.

TRL's GRPO sums each completion's rewards with `Tensor.nansum` (grpo_trainer.py), which torch-tpu refuses
("operator 'aten::nansum' is not implemented for TPU"), so GRPO stopped before its first step on both sides of the
case. `register` is called in each TRL child on the chip, for both sides alike, and the record names what stood in."""

from __future__ import annotations

from typing import Any

SUBSTITUTES = {"aten::nansum": "where(isnan(x), 0, x).sum(dim, keepdim, dtype)"}
_LIBRARIES: list[Any] = []  # a torch.library.Library unregisters its kernels when collected


def nansum(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """`torch.nansum` from `isnan`, `where` and `sum`: NaN entries count as 0, as nansum's contract says."""
    import torch

    kept = torch.where(torch.isnan(x), torch.zeros((), dtype=x.dtype, device=x.device), x)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return kept.sum(dtype=dtype) if not keepdim else kept.sum(dim=tuple(range(x.dim())), keepdim=True,
                                                                    dtype=dtype)
    return kept.sum(dim=dim, keepdim=keepdim, dtype=dtype)


def register(key: str = "PrivateUse1") -> dict[str, str]:
    """Each missing op's stand-in as `key`'s kernel, once per process; returns SUBSTITUTES (for the record)."""
    import torch

    if not _LIBRARIES:
        library = torch.library.Library("aten", "IMPL")
        library.impl("nansum", nansum, key)
        _LIBRARIES.append(library)
    return dict(SUBSTITUTES)
