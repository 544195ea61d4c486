"""The stored statistics' backward at several column steps (`lm_head.stored.Layout.columns`), the forward chunk and
kept rows as the package takes them, at each of TRL's heads: what decides `lm_head.stored.STEP_ENTRIES`."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import STATISTICS
from . import Workload, with_grads
from .lm_head import _head_args
from .lm_head_statistics import layout_name

COLUMNS = (512, 1024, 2048, 4096, 8192)


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head

    def statistics(layout: object):  # noqa: ANN202
        def loss(x: jax.Array, w: jax.Array, b: jax.Array, t: jax.Array) -> jax.Array:
            s = lm_head.statistics(x, w, b, t, scheme="stored", layout=layout)
            return -(s.target_logit - s.lse).sum() + s.entropy.sum()
        return loss

    for h in STATISTICS:
        case = f"{h.model} head (TRL's statistics): {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"
        def make(h=h) -> tuple:  # noqa: ANN001
            x, w, t = _head_args(h.rows, h.hidden, h.vocab)
            return x, w, jnp.zeros((h.vocab,), jnp.float32), t
        chosen = lm_head.stats.stored_layout(h.rows, h.hidden, h.vocab, 2)
        for columns in COLUMNS:
            lay = chosen._replace(columns=columns)
            yield Workload("lm_head_statistics", case, layout_name(lay), "fwd+bwd",
                           lambda m=make, lay=lay: (with_grads(statistics(lay), (0, 1)), m()),
                           6 * h.rows * h.hidden * h.vocab)
