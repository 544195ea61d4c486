"""Tokamax's configuration options (`tokamax.config` upstream), without absl flags.

Each option has a `value` and is a context manager factory, as upstream's:
`with config.cross_compile(True): ...`. The value is a JAX user context, so it takes part in
jit cache keys. Defaults are upstream's; environment variables `TOKAMAX_<NAME>` (e.g.
`TOKAMAX_CROSS_COMPILE=1`) take the place of upstream's `--tokamax_<name>` command-line flags.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import jax

_UNSET = object()
_TRUE = ("1", "true", "yes", "on")


@dataclasses.dataclass(frozen=True)
class _Option:
    name: str
    default: Any
    choices: tuple[Any, ...] | None = None
    context: Any = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", jax.make_user_context(_UNSET))

    def _parse(self, value: Any) -> Any:
        if isinstance(value, str) and isinstance(self.default, bool):
            value = value.strip().lower() in _TRUE
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"Invalid value for config `tokamax_{self.name}`: {value!r} (choose from {self.choices})")
        return value

    def __call__(self, value: Any) -> contextlib.AbstractContextManager[None]:
        return self.context(self._parse(value))

    @property
    def value(self) -> Any:
        if (v := self.context.value) is not _UNSET:
            return v
        env = os.environ.get(f"TOKAMAX_{self.name.upper()}")
        return self.default if env is None else self._parse(env)


autotuning_cache_miss_fallback = _Option("autotuning_cache_miss_fallback", "heuristics",
                                         ("heuristics", "autotune", "error"))
cross_compile = _Option("cross_compile", False)
ignore_autotuning_cache = _Option("ignore_autotuning_cache", False)
disable_multi_core_mode = _Option("disable_multi_core_mode", False)
