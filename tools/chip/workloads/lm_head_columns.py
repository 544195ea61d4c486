"""The LM-head kernels' inner loop over vocabulary columns (`Blocks.compute`) at several widths, beside the
whole-block body, at Llama 3 8B's head: what decides `lm_head.kernels.COMPUTE` (compile time against run time)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import jax
import jax.numpy as jnp

from ..models import HEADS
from . import Workload
from .lm_head import _head_args, with_columns

FORWARD = (256, 512, 1024, 2048, None)  # None: the whole block, no loop
BACKWARD = (1024, 2048, None)


def _name(columns: int | None) -> str:
    return "tokamax (whole-block bodies)" if columns is None else f"tokamax (columns of {columns})"


def workloads(tk: ModuleType) -> Iterator[Workload]:
    lm_head = tk.lm_head
    h = HEADS[0]
    case = f"{h.model} head: {h.rows} rows, hidden {h.hidden}, vocabulary {h.vocab}"
    flops = 2 * h.rows * h.hidden * h.vocab

    def make() -> tuple:
        return _head_args(h.rows, h.hidden, h.vocab)

    def forward(columns: int | None):  # noqa: ANN202
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
            s = lm_head.row_stats(x, w, None, t, plan=with_columns(lm_head, x, w, columns))
            return jnp.mean(s.lse - s.target_logit)
        return fn

    def labels(columns: int | None):  # noqa: ANN202
        def fn(x: jax.Array, w: jax.Array, t: jax.Array) -> tuple:
            weights = jnp.full(t.shape, 1.0 / t.shape[0], jnp.float32)
            return lm_head.fused.loss_and_grads(x, w, None, t, weights, lm_head.IDENTITY, chunk=None,
                                                plan=with_columns(lm_head, x, w, columns))[:3]
        return fn

    for c in FORWARD:
        yield Workload("lm_head_loss", case, _name(c), "fwd", lambda c=c: (forward(c), make()), flops)
    for c in BACKWARD:
        yield Workload("lm_head_loss", case, f"{_name(c)[:-1]}, kernels)", "fwd+bwd",
                       lambda c=c: (labels(c), make()), 3 * flops)
