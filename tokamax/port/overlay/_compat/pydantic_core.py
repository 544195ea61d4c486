"""Stand-in for pydantic_core: upstream names `core_schema` only inside pydantic schema hooks,
which nothing calls without pydantic."""

from __future__ import annotations

from typing import Any


class _NoSchemas:
    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(f"pydantic_core.core_schema.{name}: pydantic schemas are not part of this kernel")


core_schema = _NoSchemas()
