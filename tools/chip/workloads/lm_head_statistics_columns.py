"""The stored statistics' backward at several column steps (`lm_head.stored.Layout.columns`), the forward chunk and
kept rows as the package takes them, at each of TRL's heads: what decides `lm_head.stored.STEP_ENTRIES`."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from ..models import STATISTICS
from . import Workload, with_grads
from .lm_head_statistics import case_of, layout_name, loss_of

COLUMNS = (512, 1024, 2048, 4096, 8192)


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head
    for h in STATISTICS:
        case, make = case_of(h)
        chosen = lm_head.stats.stored_layout(h.rows, h.hidden, h.vocab, 2)
        for columns in COLUMNS:
            lay = chosen._replace(columns=columns)
            yield Workload("lm_head_statistics", case, layout_name(lay), "fwd+bwd",
                           lambda m=make, lay=lay: (with_grads(loss_of(lm_head, "stored", lay), (0, 1)), m()),
                           6 * h.rows * h.hidden * h.vocab)
