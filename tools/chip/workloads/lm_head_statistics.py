"""TRL's statistics (`lm_head.statistics`): the package's default "tokamax", the kernels and the stored scheme forced,
and the stored scheme at other layouts (each forward chunk at its best columns and most kept rows, and with no row
kept: what a soft cap takes), against XLA's plain formulation with float32 [rows, vocab] logits materialized (what
TRL's own function computes). The layouts' side-by-side is what `stored.layout`'s choice rests on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import STATISTICS
from . import Workload, with_grads
from .lm_head import _head_args, _logits


def xla_statistics(x: jax.Array, w: jax.Array, b: jax.Array, t: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(_logits(x, w) + b, axis=1)
    entropy = -(jnp.exp(log_p) * log_p).sum(1)
    return -jnp.take_along_axis(log_p, t[:, None], axis=1).sum() + entropy.sum()


def layout_name(layout: object) -> str:
    """The impl of the stored scheme forced to `layout` (`tools.chip.predict` reads the layout back from it)."""
    return f"tokamax (stored: chunk {layout.chunk}, {layout.kept} kept, columns {layout.columns})"


def compared(lm_head: ModuleType, rows: int, hidden: int, vocab: int, chip: object) -> list:
    """The layouts timed beside the package's choice: per forward chunk the one of least modelled cost, and the
    choice's chunk and columns with no row kept."""
    stored = lm_head.stored
    fits = stored.layouts(rows, vocab, 2, hidden, chip.hbm // lm_head.cost.HBM_SHARE)
    chosen = stored.layout(rows, vocab, 2, chip, hidden)

    def seconds(lay: object) -> float:
        return stored.cost(rows, hidden, vocab, 2, lay).seconds(chip)

    best = {}
    for lay in sorted(fits, key=seconds):
        best.setdefault(lay.chunk, lay)
    out = [*best.values(), chosen._replace(kept=0)]
    return [lay for lay in dict.fromkeys(out) if lay != chosen]


def loss_of(lm_head: ModuleType, scheme: str, layout: object = None) -> Callable[..., jax.Array]:
    """TRL's loss on the statistics (log-probabilities and the entropy) by `scheme` (and the stored `layout`)."""
    def loss(x: jax.Array, w: jax.Array, b: jax.Array, t: jax.Array) -> jax.Array:
        s = lm_head.statistics(x, w, b, t, scheme=scheme, layout=layout)
        return -(s.target_logit - s.lse).sum() + s.entropy.sum()
    return loss


def case_of(h: object) -> tuple[str, Callable[[], tuple]]:
    """A head's case name and its arguments' maker (x, w, a zero bias, targets)."""
    def make() -> tuple:
        x, w, t = _head_args(h.rows, h.hidden, h.vocab)
        return x, w, jnp.zeros((h.vocab,), jnp.float32), t
    return f"{h.model} head (TRL's statistics): {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}", make


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head
    for h in STATISTICS:
        case, make = case_of(h)
        flops = 2 * h.rows * h.hidden * h.vocab
        impls = (("tokamax", loss_of(lm_head, "auto")), ("tokamax (kernels)", loss_of(lm_head, "kernels")),
                 ("tokamax (stored)", loss_of(lm_head, "stored")), ("xla", xla_statistics))
        for impl, fn in impls:
            yield Workload("lm_head_statistics", case, impl, "fwd", lambda m=make, fn=fn: (fn, m()), flops)
            yield Workload("lm_head_statistics", case, impl, "fwd+bwd",
                           lambda m=make, fn=fn: (with_grads(fn, (0, 1)), m()), 3 * flops)
        for lay in compared(lm_head, h.rows, h.hidden, h.vocab, lm_head.cost.chip()):
            yield Workload("lm_head_statistics", case, layout_name(lay), "fwd+bwd",
                           lambda m=make, lay=lay: (with_grads(loss_of(lm_head, "stored", lay), (0, 1)), m()),
                           3 * flops)
