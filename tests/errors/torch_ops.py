"""Bad calls of the Torch ops (tokamax.torch_ops, but the grouped matmuls': ragged.py) and the errors they get. Tiny
CPU tensors; torch is imported inside the calls, so that this list loads in the JAX tier too (the page's rendering)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tests.errors import BadInput

CE = "tokamax.torch_ops.lm_head_cross_entropy"
STATS = "tokamax.torch_ops.lm_head_statistics"
SPLASH = "tokamax.torch_ops.splash_attention"
DIV = "tokamax.torch_ops.distillation_divergence"


def _t(shape: tuple, dtype: str = "float32") -> Any:
    import torch

    return torch.ones(shape, dtype=getattr(torch, dtype))


def _ce(tk: ModuleType, **changes: Any) -> Any:
    args = {"x": _t((8, 128)), "weight": _t((256, 128)), "bias": None, "targets": _t((8,), "int64"),
            "weights": _t((8,))}
    options = {k: v for k, v in changes.items() if k not in args}
    args.update({k: v for k, v in changes.items() if k in args})
    return tk.torch_ops.lm_head_cross_entropy(*args.values(), tk.lm_head.IDENTITY, **options)


def _splash(tk: ModuleType, q: Any = None, k: Any = None, v: Any = None, **options: Any) -> Any:
    q0, k0 = _t((2, 128, 64), "bfloat16"), _t((2, 128, 64), "bfloat16")
    return tk.torch_ops.splash_attention(q0 if q is None else q, k0 if k is None else k, k0 if v is None else v,
                                         **options)


def _div(tk: ModuleType, **options: Any) -> Any:
    x, w = _t((8, 128)), _t((256, 128))
    return tk.torch_ops.distillation_divergence(x, w, None, x, w, None, **{"beta": 0.5, **options})


CASES: list[BadInput] = [
    BadInput(CE, "smoothing", "1.5", "ValueError", "tokamax lm_head_cross_entropy: smoothing must be a number in "
             "[0, 1), got 1.5", lambda tk: _ce(tk, smoothing=1.5), tier="torch"),
    BadInput(CE, "z_loss", "-1", "ValueError", "tokamax lm_head_cross_entropy: z_loss must be a number in [0, inf), "
             "got -1", lambda tk: _ce(tk, z_loss=-1), tier="torch"),
    BadInput(CE, "chunk", "-1", "ValueError", "tokamax lm_head_cross_entropy: chunk must be None (the package's "
             "choice), 0 (the kernels) or a positive number of rows, got -1", lambda tk: _ce(tk, chunk=-1),
             tier="torch"),
    BadInput(CE, "targets", "float32", "TypeError", "tokamax lm_head_cross_entropy: targets must be int32 or int64, "
             "got torch.float32", lambda tk: _ce(tk, targets=_t((8,))), tier="torch"),
    BadInput(CE, "weight", "hidden 64 against x's 128", "ValueError", "tokamax lm_head_cross_entropy: the hidden "
             "sizes must agree: x has 128, weight has 64", lambda tk: _ce(tk, weight=_t((256, 64))), tier="torch"),
    BadInput(CE, "x", "float16", "TypeError", "tokamax lm_head_cross_entropy: x must be bfloat16 or float32, got "
             "torch.float16", lambda tk: _ce(tk, x=_t((8, 128), "float16")), tier="torch"),
    BadInput(CE, "weights", "[4] for 8 rows", "ValueError", "tokamax lm_head_cross_entropy: weights must be [rows] "
             "(8), got (4,)", lambda tk: _ce(tk, weights=_t((4,))), tier="torch"),
    BadInput(STATS, "targets", "float32", "TypeError", "tokamax lm_head_statistics: targets must be int32 or int64",
             lambda tk: tk.torch_ops.lm_head_statistics(_t((8, 128)), _t((256, 128)), None, _t((8,))), tier="torch"),
    BadInput(SPLASH, "q", "float16", "TypeError", "tokamax splash_attention: q must be bfloat16 or float32, got "
             "torch.float16", lambda tk: _splash(tk, *(_t((2, 128, 64), "float16"),) * 3), tier="torch"),
    BadInput(SPLASH, "k", "float32 against bfloat16 q", "TypeError", "tokamax splash_attention: q and k and v must "
             "share a dtype", lambda tk: _splash(tk, k=_t((2, 128, 64))), tier="torch"),
    BadInput(SPLASH, "q", "2-D", "ValueError", "tokamax splash_attention: q must be [heads, q_len, head_dim] or "
             "[batch, heads, q_len, head_dim], got shape (128, 64)",
             lambda tk: _splash(tk, q=_t((128, 64), "bfloat16")), tier="torch"),
    BadInput(SPLASH, "soft_cap", "0", "ValueError", "tokamax splash_attention: soft_cap must be positive, got 0",
             lambda tk: _splash(tk, soft_cap=0), tier="torch"),
    BadInput(SPLASH, "window", "(-1, 0)", "ValueError", "tokamax splash_attention: window sizes must be ints >= 0",
             lambda tk: _splash(tk, window=(-1, 0)), tier="torch"),
    BadInput(DIV, "beta", "2", "ValueError", "tokamax distillation_divergence: beta must be a number in [0, 1], got 2",
             lambda tk: _div(tk, beta=2), tier="torch"),
    BadInput(DIV, "chunk", '"auto"', "ValueError", "tokamax distillation_divergence: chunk must be an int >= 0",
             lambda tk: _div(tk, chunk="auto"), tier="torch"),
]
