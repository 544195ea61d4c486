"""The kernel switched on for transformers without the Hub (the chip host reaches none and has no `kernels`): the
bundle imported as a plain package (`tools.chip.load`), its attention registered with transformers under a local
name, as transformers registers a Hub kernel's (`load_and_register_attn_kernel`: the function, and
flash-attention-2's masks, the [batch, kv_len] padding masks it takes), its experts and fused loss as a user
switches them on (`register_experts()`, `use_fused_loss(model)`)."""

from __future__ import annotations

import os
from types import ModuleType

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # torch-tpu owns the chip; JAX exports for it

ATTENTION = "tokamax"  # what `attn_implementation` names: the Hub's "kernels-community/tokamax:attention", locally
FLASH = "tokamax_flash"  # "...:flash_attention" (its name must hold "flash" for continuous batching)


def bundle() -> ModuleType:
    """The built bundle (build/torch-tpu) as the package `tokamax_chip`, its attention names registered."""
    from tools.chip.load import package

    tokamax = package()
    register_attention(tokamax)
    return tokamax


def register_attention(tokamax: ModuleType) -> None:
    """`ATTENTION` and `FLASH` made transformers attention implementations, with the masks a Hub kernel gets."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    flash_masks = ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"]
    for name, function in ((ATTENTION, tokamax.attention), (FLASH, tokamax.flash_attention)):
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, flash_masks)


def device() -> str:
    """"tpu" where torch-tpu answers, else "cpu" (the scripts' tiny runs on a host without a chip)."""
    import torch

    try:
        import torch_tpu  # noqa: F401  (torch autoloads it; imported again where autoloading is off)
    except ImportError:
        pass
    # torch.tpu.is_available() refuses callers outside torch and torch_tpu; torch.accelerator answers
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return "tpu" if accelerator is not None and accelerator.type == "tpu" else "cpu"
