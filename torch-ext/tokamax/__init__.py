"""kernels-community/tokamax: Tokamax 0.0.17's Pallas Mosaic TPU kernels, needing only JAX.

Loading this package imports nothing heavy; each kernel module (and JAX with it) is imported on
first use, e.g. `tokamax.ragged_dot.gmm(...)`; upstream's public ops with their config choice and
backward passes are in `tokamax.ops` (`tokamax.ops.ragged_dot(...)`); Torch users call `tokamax.torch_ops.gmm(...)` on
Torch tensors. The kernel modules are generated at build time
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
    "batched_rpa",
    "causal_conv1d_gated_delta_rule",
    "csa_gather",
    "deepseek_rope",
    "dsv4_compressor",
    "fused_fp8_matmul",
    "fused_moe",
    "fused_moe_decode",
    "gmm_v2",
    "grouped_lowrank_proj",
    "kda",
    "lightning_indexer",
    "linear_softmax_cross_entropy_loss",
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

# Our modules, also loaded on first use: running the kernels on a CPU host (emulation.py), the
# public ops with upstream's config choice (ops/), splash attention at any length and batch
# (splash/), the linear softmax cross-entropy at any size (lm_loss/), the LM head's per-row statistics on
# kernels of our own (lm_head/: entropy, soft caps, temperatures, for TRL's head and the loss options),
# autotuning result files applied to JAX calls and Torch ops (tuning/), and the Torch ops (torch_ops/,
# which needs torch and torch-tpu), and ring attention over long sequences with a lazy, optionally load-balanced
# causal mask (ring/), and distillation's divergence between a student's and a teacher's heads (distill/), the
# grouped matmul's tiles where upstream's tables have none (moe/), and the chip figures every block and tile
# choice is weighed by (roofline), and what the package chooses for a call and why (explain/, a module you call:
# `tokamax.explain(tokamax.ops.ragged_dot, lhs, rhs, group_sizes, chip="v5e")`; docs/choices.md).
HELPER_MODULES = ("distill", "emulation", "explain", "integrations", "layers", "lm_head", "lm_loss", "moe", "ops",
                  "ring", "roofline", "splash", "torch_ops", "tuning")

# transformers' entry points (need torch, torch-tpu and transformers): the attention function that
# `attn_implementation="kernels-community/tokamax:attention"` loads, the experts registration, and
# the fused LM loss (`tokamax.use_fused_loss(model)`, which TRL's fused head runs on too), the paged
# attention continuous batching loads (`...:flash_paged`), and `...:flash_attention`, which serves both.
FUNCTIONS = {"attention": ".integrations.transformers", "flash_attention": ".integrations.transformers",
             "flash_attn_forward": ".integrations.transformers", "flash_paged": ".integrations.transformers",
             "register_experts": ".integrations.transformers", "use_fused_loss": ".integrations.transformers"}

__all__ = ["KERNEL_MODULES", "TOKAMAX_VERSION", "__version__", *KERNEL_MODULES, *HELPER_MODULES, *FUNCTIONS]

if TYPE_CHECKING:  # pragma: no cover
    from ._ported import ragged_dot, splash_attention  # noqa: F401


def __getattr__(name: str) -> ModuleType:
    if name in FUNCTIONS:
        try:
            function = getattr(importlib.import_module(FUNCTIONS[name], __name__), name)
        except ImportError as e:
            raise ImportError(f"{__name__}.{name} needs torch, torch-tpu and transformers ({e})") from e
        globals()[name] = function
        return function
    if name in KERNEL_MODULES or name in HELPER_MODULES:
        where = f"._ported.{name}" if name in KERNEL_MODULES else f".{name}"
        try:
            module = importlib.import_module(where, __name__)
        except ImportError as e:
            if name not in ("torch_ops", "layers"):
                raise
            raise ImportError(f"{__name__}.{name} needs torch and torch-tpu ({e}); "
                              "the JAX kernel modules work without them") from e
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
