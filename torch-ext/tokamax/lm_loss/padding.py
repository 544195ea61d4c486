"""Padding the linear softmax cross-entropy to the kernel's 128-lane blocks.

Upstream's kernel masks partial blocks but reads them whole, past the ends of x and w; JAX's
interpreter refuses such reads, and this kernel does not rely on them. Every dimension is padded to
a multiple of 128 instead:

- rows: zeros with label 0 (their losses are the caller's to drop: `padded_rows` rows are extra);
- hidden columns: zeros in x and w, which add nothing to any logit;
- vocabulary columns (when the vocabulary is off the lanes): their logit must vanish in every
  softmax, so one more hidden column carries it: 1 in x, PADDED_LOGIT in w's padded columns and 0
  in its real ones. exp(PADDED_LOGIT - lse) is 0 in float32, so neither a loss nor a gradient of a
  real row changes; labels never point at padded columns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

LANES = 128
PADDED_LOGIT = -30000.0
"""The logit of every padded vocabulary column (a bfloat16 value; far below any real logit)."""


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def padded_rows(rows: int) -> int:
    """The row count the kernel runs at for `rows` rows."""
    return _round_up(rows, LANES)


def padded_operands(x: jax.Array, labels: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x [rows, hidden], labels [rows] (in [0, vocab)), w [hidden, vocab] padded as the module says."""
    rows, hidden = x.shape
    vocab = w.shape[1]
    padded_vocab = _round_up(vocab, LANES)
    extra = int(padded_vocab != vocab)  # the hidden column that carries the padded columns' logit
    padded_hidden = _round_up(hidden + extra, LANES)
    x_p = x
    if extra:
        x_p = jnp.concatenate([x, jnp.ones((rows, 1), x.dtype)], axis=1)
    x_p = jnp.pad(x_p, ((0, padded_rows(rows) - rows), (0, padded_hidden - hidden - extra)))
    w_p = jnp.pad(w, ((0, 0), (0, padded_vocab - vocab)))
    if extra:
        logit_row = jnp.where(jnp.arange(padded_vocab) < vocab, 0.0, PADDED_LOGIT).astype(w.dtype)[None]
        w_p = jnp.concatenate([w_p, logit_row], axis=0)
    w_p = jnp.pad(w_p, ((0, padded_hidden - hidden - extra), (0, 0)))
    labels_p = jnp.pad(labels, (0, padded_rows(rows) - rows))
    return x_p, labels_p, w_p
