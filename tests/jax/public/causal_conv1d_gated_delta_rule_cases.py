"""Public causal conv1d + gated delta rule calls on v6e and v7x (upstream's Op supports generation >= 6). Upstream
has no public function for it, so the calls go through its Op class `ops.tpu.CausalConv1dGatedDeltaRule()` with
upstream's config choice; forward only (no VJP upstream). Its table is registered in tpu_ops_cases.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import CALL_CHIPS, PublicCase, Table

TABLES: list[Table] = []
CHIPS = tuple(chip for chip in CALL_CHIPS if chip != "v5e")


def _specs(tokens: int, n_kq: int, n_v: int, d: int, kernel_size: int, seqs: int, dtype: str) -> tuple:
    dim = 2 * n_kq * d + n_v * d
    return (((tokens, dim), dtype), ((tokens, n_v), dtype), ((tokens, n_v), dtype),
            ((seqs + 1, kernel_size - 1, dim), dtype), ((seqs + 1, n_v, d, d), "float32"),
            ((dim, 1, kernel_size), dtype), ((dim,), dtype), ((n_v,), "float32"), ((n_v,), "float32"),
            ((seqs + 1,), "int32"), ((seqs,), "int32"), ((3,), "int32"), ((seqs,), "int32"))


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.tpu.CausalConv1dGatedDeltaRule()(*args, **kw))


def cases() -> list[PublicCase]:
    calls = [
        ("gdn-f32-t16-kq2v2-d128-k4-seqs2", _specs(16, 2, 2, 128, 4, 2, "float32"),
         _forward(n_kq=2, n_v=2, d_k=128, d_v=128, kernel_size=4)),
        ("gdn-bf16-t64-kq2v4-d128-k4-seqs4", _specs(64, 2, 4, 128, 4, 4, "bfloat16"),
         _forward(n_kq=2, n_v=4, d_k=128, d_v=128, kernel_size=4)),
    ]
    return [PublicCase(f"causal_conv1d_gated_delta_rule/mosaic/{name}", chip, specs, build)
            for chip in CHIPS for name, specs, build in calls]
