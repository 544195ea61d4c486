"""A Pallas kernel step's body over its vocabulary block a few columns at a time: one `fori_loop` iteration's
code for Mosaic to compile instead of the whole [rows, vocab] block unrolled (as splash's `bkv_compute`). The
LM head's and distillation's kernels share it; the grid, the HBM blocks and what is read stay as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.experimental import pallas as pl

COLUMNS = 256
"""Columns of one iteration unless a kernel asks otherwise: compiled for the v5e by this repository's libtpu
(hidden 4096, Llama 3 8B's blocks), the LM head's forward at 1024 x 1024 in 4.3 s against 13.7 unrolled, dx at
512 x 1024 in 3.8 against 15.3, dw at 1024 x 512 in 4.8 against 11.5."""


def width(block: int, requested: int | None = None) -> int:
    """The columns of one iteration over a block of `block` (`requested`, else `COLUMNS`): the whole block where
    that is no wider or does not divide it."""
    w = requested or COLUMNS
    return w if w < block and block % w == 0 else block


def over(block: int, columns: int, body: Callable[[Any, Any], Any], carry: Any) -> Any:
    """body(offset, carry) over a block of `block` columns in `columns`s (the offset a multiple of `columns`);
    a block no wider runs the body once, without a loop."""
    if columns == block:
        return body(0, carry)
    return jax.lax.fori_loop(0, block // columns, lambda c, carry: body(pl.multiple_of(c * columns, columns), carry),
                             carry)
