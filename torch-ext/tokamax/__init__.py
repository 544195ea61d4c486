"""kernels-community/tokamax: Tokamax 0.0.17's Pallas Mosaic TPU kernels, needing only JAX.

Loading this package imports nothing heavy; each kernel module (and JAX with it) is imported on
first use, e.g. `tokamax.ragged_dot.gmm(...)`. The kernel modules are generated at build time
by the port (tools/porter) into `_ported/`; everything else here is hand-written.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

__version__ = "1.0.0"
"""Version of this kernel's API (Hub branch v1)."""

TOKAMAX_VERSION = "0.0.17"
"""The upstream Tokamax release whose kernels this build holds."""

# The JAX kernel modules, each loaded on first attribute access.
KERNEL_MODULES = (
    "csa_gather",
    "deepseek_rope",
    "dsv4_compressor",
    "fused_fp8_matmul",
    "fused_moe_decode",
    "gmm_v2",
    "grouped_lowrank_proj",
    "masked_dense_mla",
    "mhc",
    "mla",
    "mla_swa",
    "proj_and_save_state",
    "ragged_dot",
    "ragged_gather",
    "ragged_gather_reduce",
    "ring_attention",
    "router_topk",
    "sparse_mla",
    "splash_attention",
    "topk",
)

__all__ = ["KERNEL_MODULES", "TOKAMAX_VERSION", "__version__", *KERNEL_MODULES]

if TYPE_CHECKING:  # pragma: no cover
    from ._ported import ragged_dot, splash_attention  # noqa: F401


def __getattr__(name: str) -> ModuleType:
    if name in KERNEL_MODULES:
        module = importlib.import_module(f"._ported.{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
