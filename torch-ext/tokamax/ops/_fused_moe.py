"""Upstream's experimental fused MoE (`fused_moe`, `_src.ops.experimental.fused_moe.api`), its refusals
named: the kernel plans its VMEM and transport at trace time and raises a bare ValueError for experts
it cannot hold (Mixtral's 4,096 x 14,336 bf16 experts: "the kernel's VMEM buffers need 364.0MiB, over
the 125.4MiB budget" on v6e) or a hidden size off the 128 lanes (gpt-oss's 2,880); here the same
refusal says which op and call it is, before the compiler sees anything.

Upstream memoizes each built kernel on its shapes and options, not the chip, yet plans it against the
chip's VMEM: a process that traces for several chips (cross-compiling, as the compile tier does) got a
v5e plan back for TPU7x (DeepSeek-V3's bf16 experts lowered there instead of being refused). The memo is
emptied here whenever the chip changes."""

from __future__ import annotations

import importlib
from typing import Any

_PACKAGE = "._ported._src.ops.experimental.fused_moe"
_built_for: list[Any] = [None]  # the chip upstream's kernel memo holds builds for


def _memo_for_this_chip(root: str) -> None:
    """Empties upstream's build memo when the chip (generation, VMEM) differs from its builds'."""
    import jax.experimental.pallas.tpu as pltpu

    try:
        info = pltpu.get_tpu_info()
    except Exception:  # noqa: BLE001 - no TPU and no emulated chip: upstream's Op refuses the call itself
        return
    chip = (info.generation, info.vmem_capacity_bytes, str(getattr(info, "chip_version", "")))
    if _built_for[0] != chip:
        importlib.import_module(f"{_PACKAGE}.kernel", root)._BUILD_CACHE.clear()
        _built_for[0] = chip


def fused_moe(x: Any, w1: Any, w2: Any, gating: Any, w1_scale: Any = None, w2_scale: Any = None,
              w1_bias: Any = None, w2_bias: Any = None, **kw: Any) -> Any:
    """Upstream's `fused_moe` (routing, both expert projections and the combine in one kernel)."""
    root = __package__.rsplit(".", 1)[0]
    _memo_for_this_chip(root)
    api = importlib.import_module(f"{_PACKAGE}.api", root)
    try:
        return api.fused_moe(x, w1, w2, gating, w1_scale, w2_scale, w1_bias, w2_bias, **kw)
    except (ValueError, NotImplementedError) as e:
        if "tokamax" in str(e):
            raise
        raise type(e)(f"tokamax fused_moe: x {tuple(x.shape)}, w1 {tuple(w1.shape)} {w1.dtype}, "
                      f"w2 {tuple(w2.shape)}: {e}") from e
