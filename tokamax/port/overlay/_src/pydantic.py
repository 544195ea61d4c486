"""Upstream's pydantic helpers, as far as the Op layer calls them without pydantic: JSON dumps
of op arguments (for profiling metadata and cache-miss logs) through `_compat.spec_json`."""

from __future__ import annotations

import inspect
from typing import Any

from .._compat.pydantic import TypeAdapter

__all__ = ["AnyInstanceOf", "TypeAdapter", "get_adapter", "get_arg_spec_model"]


class AnyInstanceOf:
    def __class_getitem__(cls, item: Any) -> Any:
        return item


def get_arg_spec_model(name: str, signature: inspect.Signature) -> str:
    return name


def get_adapter(spec: Any) -> TypeAdapter:
    return TypeAdapter(spec)
