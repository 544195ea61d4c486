"""What a block's calls of a Torch op passed: one argument of each call of a `TunedOp` (its `_op` wrapped for the
block), for tests that check which token, flag or static value reached the op."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def arguments(op: Any, index: int) -> Iterator[list[Any]]:
    """The argument at `index` of every call of `op` (a `TunedOp`) made in the block, in any thread."""
    seen: list[Any] = []
    original = op._op

    def spy(*args: Any) -> Any:
        seen.append(args[index])
        return original(*args)

    op._op = spy
    try:
        yield seen
    finally:
        op._op = original
