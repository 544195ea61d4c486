"""Public batched ragged paged attention calls (`ops.batched_ragged_paged_attention(implementation="mosaic_tpu")`),
upstream's Op supporting generation >= 5, forward only (upstream has no VJP): GQA over a bf16 paged
cache with upstream's heuristic config, then (v7x) a sliding window with a soft cap returning the log-sum-exp. Its table
is registered in tpu_ops_cases.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cases import PublicCase, Table

TABLES: list[Table] = []


def _specs(tokens: int, hq: int, hkv: int, d: int, pages: int, page: int, seqs: int, per_seq: int) -> tuple:
    return (((tokens, hq, d), "bfloat16"), ((tokens, hkv, d), "bfloat16"), ((tokens, hkv, d), "bfloat16"),
            ((pages, page, 2 * hkv, d), "bfloat16"), ((seqs,), "int32"), ((seqs * per_seq,), "int32"),
            ((seqs + 1,), "int32"), ((3,), "int32"))


def _forward(**kw: Any) -> Callable[[Any], Callable[..., Any]]:
    return lambda api: (lambda *args: api.ops.batched_ragged_paged_attention(*args, implementation="mosaic_tpu",
                                                                             **kw))


def cases() -> list[PublicCase]:
    # Each RPA call takes tens of seconds to lower on each side, so one chip each here: the Torch tier holds
    # the same public call, at the arguments transformers' continuous batching produces, to upstream's on
    # v5e, v6e and v7x (tests/torch/transformers/test_paged_identity.py).
    out = [PublicCase("batched_rpa/mosaic/gqa-h8kv2-d128-t64-page16-seqs4", "v6e",
                      _specs(64, 8, 2, 128, 32, 16, 4, 8), _forward(sm_scale=128**-0.5))]
    out.append(PublicCase("batched_rpa/mosaic/window-softcap-lse-h4kv4-d128-t32-page32-seqs2", "v7x",
                          _specs(32, 4, 4, 128, 16, 32, 2, 8),
                          _forward(sm_scale=128**-0.5, sliding_window=64, soft_cap=30.0, return_lse=True)))
    return out
