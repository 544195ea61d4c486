"""The grouped matmul at uneven routing alone (`moe`'s workloads at `models.IMBALANCED`): `bench --only moe_uneven`."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from ..models import IMBALANCED
from . import Workload, moe


def workloads(tk: ModuleType) -> Iterator[Workload]:
    names = tuple(s.model for s in IMBALANCED)
    return (w for w in moe.workloads(tk) if w.case.startswith(names))
