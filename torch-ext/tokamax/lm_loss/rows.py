"""Per-row losses of the linear softmax cross-entropy at any size, through upstream's public op (the
Mosaic kernels, with upstream's config choice) on the padded operands, and its backward through
upstream's VJP Op on the saved residuals (no second forward), as upstream's custom VJP runs it.

The losses come back for the padded rows (`padding.padded_rows(rows)`); the caller drops the extra
rows and masks ignored ones, so reductions, `ignore_index` and `num_items_in_batch` stay outside the
kernel call.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import jax
import jax.numpy as jnp

from .. import checks, hosts
from .padding import padded_operands


@functools.cache
def _mosaic_op() -> Any:
    """The Op upstream's public call runs for `implementation="mosaic_tpu"`."""
    api = importlib.import_module(".._ported._src.ops.linear_softmax_cross_entropy_loss.api", __package__)
    return api.IMPLEMENTATIONS["mosaic_tpu"]


def check(op: str, x: jax.Array, labels: jax.Array, w: jax.Array) -> None:
    """x [rows, hidden] and w [hidden, vocab] (upstream's layout, not nn.Linear's) of one float dtype, labels an
    integer [rows]: refused by name before the padding reads their shapes."""
    checks.rank(op, "x", x, (2,), "[rows, hidden]")
    checks.rank(op, "w", w, (2,), "[hidden, vocab]")
    checks.floats(op, x=x, w=w)
    checks.same(op, "the hidden size", x=x.shape[1], w=w.shape[0])
    checks.shape(op, "labels", labels, (x.shape[0],), "[rows]")
    checks.integers(op, "labels", labels)


@hosts.emulated("lm_loss.row_losses")
def row_losses(x: jax.Array, labels: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(losses, lse), float32 [padded rows]: lse(x @ w) - (x @ w)[label] per row, and the log-sum-exp.
    x [rows, hidden] and w [hidden, vocab] of one float dtype; labels int32 [rows] in [0, vocab)."""
    check("lm_loss.row_losses", x, labels, w)
    x_p, labels_p, w_p = padded_operands(x, labels, w)
    losses, (lse,) = _mosaic_op()(x_p, labels_p, w_p, reduction="none", return_residuals=True)
    return losses, lse


@hosts.emulated("lm_loss.row_losses_vjp")
def row_losses_vjp(x: jax.Array, labels: jax.Array, w: jax.Array, lse: jax.Array, losses: jax.Array,
                   d_losses: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(dx, dw), float32, shaped as x and w: the gradients of sum(d_losses * losses) from `row_losses`'
    residuals (`d_losses` float32 [padded rows]; give padded and ignored rows 0)."""
    x_p, labels_p, w_p = padded_operands(x, labels, w)
    dx, _, dw = _mosaic_op().vjp((lse,), losses, d_losses.astype(jnp.float32), x_p, labels_p, w_p, reduction="none")
    return jax.lax.slice(dx, (0, 0), x.shape), jax.lax.slice(dw, (0, 0), w.shape)
