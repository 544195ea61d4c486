"""Stand-in for typing_extensions: upstream takes only `override` from it (typing has it from 3.12)."""

from __future__ import annotations

import typing
from typing import Any


def _identity(fn: Any) -> Any:
    return fn


override = getattr(typing, "override", _identity)
