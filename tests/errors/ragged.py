"""Bad calls of the grouped matmul (`tokamax.ops.ragged_dot`, `ragged_dot_general`; `tokamax.torch_ops.gmm`, `tgmm`,
`ragged_dot`) and the errors they get. Every one is refused before a kernel runs: tiny shapes, no emulation needed.
torch is imported inside the calls, so that this list loads in the JAX tier too."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tests.errors import BadInput

RD, RDG = "tokamax.ops.ragged_dot", "tokamax.ops.ragged_dot_general"
GMM, TGMM, TRD = "tokamax.torch_ops.gmm", "tokamax.torch_ops.tgmm", "tokamax.torch_ops.ragged_dot"


def _jax(tk: ModuleType, sizes: Any, lhs: tuple = (16, 8), rhs: tuple = (4, 8, 8), general: bool = False) -> Any:
    import jax
    import jax.numpy as jnp

    x, w = jnp.ones(lhs, jnp.float32), jnp.ones(rhs, jnp.float32)
    if general:
        dims = jax.lax.RaggedDotDimensionNumbers((([1], [1]), ([], [])), [0], [0])
        return tk.ops.ragged_dot_general(x, w, jnp.asarray(sizes), dims)
    return tk.ops.ragged_dot(x, w, jnp.asarray(sizes))


def _int32(sizes: list) -> Any:
    import numpy as np

    return np.asarray(sizes, np.int32)


def _torch(tk: ModuleType, op: str, sizes: list, dtype: str = "int32") -> Any:
    import torch

    x, g = torch.ones(16, 8), torch.tensor(sizes, dtype=getattr(torch, dtype))
    if op == "tgmm":
        return tk.torch_ops.tgmm(x, torch.ones(16, 8), g)
    return getattr(tk.torch_ops, op)(x, torch.ones(4, 8, 8), g)


CASES: list[BadInput] = [
    BadInput(RD, "group_sizes", "3 sizes for 4 experts", "ValueError",
             "group_sizes must have one entry per group of rhs (4), got shape (3,)",
             lambda tk: _jax(tk, _int32([4, 4, 4]))),
    BadInput(RDG, "group_sizes", "3 sizes for 4 experts", "ValueError",
             "group_sizes must have one entry per group of rhs (4), got shape (3,)",
             lambda tk: _jax(tk, _int32([4, 4, 4]), general=True)),
    BadInput(RD, "group_sizes", "float sizes", "TypeError", "group_sizes must be an integer array (int32), got float32",
             lambda tk: _jax(tk, [4.0, 4.0, 4.0, 4.0])),
    BadInput(RD, "group_sizes", "a negative size (concrete)", "ValueError",
             "group_sizes must be non-negative, got [8, -2, 4, 4]", lambda tk: _jax(tk, _int32([8, -2, 4, 4]))),
    BadInput(RD, "group_sizes", "sizes summing past the rows (concrete)", "ValueError",
             "group_sizes sum to 20, past lhs's 16 rows", lambda tk: _jax(tk, _int32([8, 4, 4, 4]))),
    BadInput(RD, "lhs", "3-D", "ValueError", "lhs must be 2-D [m, k], got shape (2, 16, 8)",
             lambda tk: _jax(tk, _int32([4, 4, 4, 4]), lhs=(2, 16, 8))),
    BadInput(RD, "rhs", "2-D", "ValueError", "rhs must be 3-D [groups, k, n], got shape (8, 8)",
             lambda tk: _jax(tk, _int32([4, 4, 4, 4]), rhs=(8, 8))),
    BadInput(GMM, "group_sizes", "a negative size", "ValueError", "group_sizes must be non-negative, got [8, -2, 4, 4]",
             lambda tk: _torch(tk, "gmm", [8, -2, 4, 4]), tier="torch"),
    BadInput(GMM, "group_sizes", "sizes summing past the rows", "ValueError",
             "group_sizes sum to 20, past lhs's 16 rows", lambda tk: _torch(tk, "gmm", [8, 4, 4, 4]), tier="torch"),
    BadInput(GMM, "group_sizes", "float sizes", "TypeError", "group_sizes must be int32, got torch.float32",
             lambda tk: _torch(tk, "gmm", [4, 4, 4, 4], "float32"), tier="torch"),
    BadInput(TRD, "group_sizes", "3 sizes for 4 experts", "ValueError",
             "group_sizes must have one entry per group (4), got shape (3,)",
             lambda tk: _torch(tk, "ragged_dot", [4, 4, 4]), tier="torch"),
    BadInput(TGMM, "group_sizes", "sizes summing past the rows", "ValueError",
             "group_sizes sum to 17, past lhs's 16 rows", lambda tk: _torch(tk, "tgmm", [8, 4, 4, 1]), tier="torch"),
]
