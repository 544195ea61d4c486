"""Torch ops over upstream's public TPU ops, made with torch-tpu's `jax_op` (`tokamax.torch_ops`).

One module per op family, named as upstream's Torch op folders (`ragged_dot`, `splash_attention`,
...), each listing in `__all__` the functions users call and the custom ops behind them. This
package re-exports them all, so `tokamax.torch_ops.gmm(...)` works; a function may share its
family's name (`ragged_dot`), so the modules themselves are in `families`. Each op:

- is a `torch.library.custom_op` in this build's own namespace (two versions of the kernel never
  share op names), made by `_bridge.register`;
- runs upstream's public op, so upstream's config choice per chip and shape (and its backward
  pass, through `jax.vjp`, where upstream's Torch ops register one);
- checks its arguments first (`_checks`), so a bad call names the argument;
- runs on CPU tensors in Pallas TPU interpret mode where JAX's interpreter can, and says why not
  where it cannot; has a fake kernel that takes symbolic sizes (`torch.compile(dynamic=True)`).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from ._bridge import chip_for_tracing, register, to_jax, to_torch

families: dict[str, ModuleType] = {
    m.name: importlib.import_module(f".{m.name}", __name__)
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if not m.name.startswith("_")
}
"""The op-family modules by name, each with its `__all__`."""

__all__ = ["chip_for_tracing", "families", "register", "to_jax", "to_torch"]
for _module in families.values():
    globals().update({name: getattr(_module, name) for name in _module.__all__})
    __all__ += _module.__all__
del _module

from . import _sharding  # noqa: E402  (the DTensor rules need the op families loaded)

_sharding.register()
