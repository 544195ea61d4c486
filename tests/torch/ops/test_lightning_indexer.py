"""The Torch lightning indexer ops (`lightning_indexer`, with and without scores): TPU7x only (JAX's interpreter
cannot run the SparseCore top-k, tests/jax/cases/lightning_indexer.py), so no values on CPU; and tracing them
needs jax >= 0.11.1, newer than the Torch tier's 0.10.2: here the function says so, and the checks that trace
upstream's op (fakes against `jax.eval_shape`, the Op in the TPU lowering) run only on such a jax. The fakes are
checked against upstream's documented outputs (int32 [tokens, k], as `jax.eval_shape` gives with jax 0.12),
with symbolic sizes and one graph for two token counts; then the CPU refusal and the argument checks.
"""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest
import torch

from tests.jax.cases import lightning_indexer as cases

from . import checks
from .checks import meta

_TRACES = hasattr(importlib.import_module("jax.experimental.mosaic"), "OptLevel")
_NO_TRACE = (f"jax {jax.__version__} cannot trace upstream's SparseCore top-k (no jax.experimental.mosaic.OptLevel; "
             "needs jax >= 0.11.1)")
_DEFAULTS = {"compression_ratio": 1, "kv_layout": "head_along_sublane", "cp_size": 1, "cp_rank": 0,
             "interleave_size": 1}


def _tensors(tokens: int = 16, heads: int = 8, d: int = 128, pages: int = 8, page: int = 128, seqs: int = 2,
             per_seq: int = 4, device: str = "cpu") -> list[torch.Tensor]:
    """Zero tensors of the op's layout (tests/jax/public/lightning_indexer_cases.py's shapes by default): q,
    indexer_weights, cache_kv, seq_lens, page_indices, cu_q_lens, distribution."""
    bf16 = {"dtype": torch.bfloat16, "device": device}
    i32 = {"dtype": torch.int32, "device": device}
    return [torch.zeros(tokens, heads, d, **bf16), torch.zeros(tokens, heads, **bf16),
            torch.zeros(pages, page // 4, 4, 2 * d, dtype=torch.uint8, device=device), torch.zeros(seqs, **i32),
            torch.zeros(seqs * per_seq, **i32), torch.zeros(seqs + 1, **i32), torch.zeros(3, **i32)]


def _op_args(tensors: list[torch.Tensor], k: int, **options: object) -> list[object]:
    return [*tensors, k, *{**_DEFAULTS, **options}.values()]


def _case_tensors() -> list[torch.Tensor]:
    """tests/jax/cases/lightning_indexer.py's inputs: a decode and a mixed sequence over an fp8 paged cache."""
    return [torch.from_numpy(a) if a.dtype in (np.uint8, np.int32) else
            torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16) for a in cases._inputs()]


@pytest.mark.kernels_ci
@pytest.mark.jax_floor
def test_refuses_cpu_tensors_naming_the_interpreters_limit(ops, tokamax):
    tensors = _case_tensors()
    checks.refuses_on_cpu(lambda: ops.lightning_indexer_op(*_op_args(tensors, cases.TOPK)), "lightning_indexer")
    checks.refuses_on_cpu(lambda: ops.lightning_indexer_scores_op(*_op_args(tensors, cases.TOPK)),
                          "lightning_indexer_scores")
    if _TRACES:
        checks.refuses_on_cpu(lambda: ops.lightning_indexer(*tensors, cases.TOPK), "lightning_indexer")
    else:  # the function names the jax it needs before the op refuses CPU tensors
        with pytest.raises(RuntimeError, match=r"lightning_indexer needs jax >= 0.11.1 "
                                               r"\(jax.experimental.mosaic.OptLevel\), "
                                               rf"this is jax {jax.__version__}"):
            ops.lightning_indexer(*tensors, cases.TOPK)
    checks.assert_in_build_namespace(tokamax, ops.lightning_indexer_op, ops.lightning_indexer_scores_op)


@pytest.mark.kernels_ci
def test_fakes_give_upstreams_output_shapes(ops):
    tensors = _tensors(device="meta")
    indices = ops.lightning_indexer_op(*_op_args(tensors, 32))
    pair = ops.lightning_indexer_scores_op(*_op_args(tensors, 64, compression_ratio=4))
    assert [(tuple(t.shape), t.dtype) for t in (indices, *pair)] == [((16, 32), torch.int32)] + [
        ((16, 64), torch.int32)] * 2


@pytest.mark.kernels_ci
@pytest.mark.skipif(not _TRACES, reason=_NO_TRACE)
def test_fakes_match_jax_shapes(ops):
    f = checks.family(ops, "lightning_indexer")
    checks.fake_matches_jax(ops, ops.lightning_indexer_op, f._lightning_indexer_jax, *_op_args(_tensors(), 32),
                            chip="v7x")
    checks.fake_matches_jax(ops, ops.lightning_indexer_scores_op, f._lightning_indexer_scores_jax,
                            *_op_args(_tensors(tokens=32, heads=16, pages=16, seqs=4), 64, compression_ratio=4),
                            chip="v7x")


@pytest.mark.kernels_ci
def test_traces_with_symbolic_token_count_and_compiles_once(ops):
    # Through the ops (the function refuses a jax that cannot trace upstream's op before reaching them).
    def step(*tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return ops.lightning_indexer_op(*_op_args(list(tensors), 32)), *ops.lightning_indexer_scores_op(
            *_op_args(list(tensors), 64, compression_ratio=4))

    # Token counts equal to no other size (duck sizing would tie them to it).
    small, large = _tensors(tokens=24, device="meta"), _tensors(tokens=40, device="meta")
    graph = checks.traces_symbolically(step, *small)
    assert "lightning_indexer" in graph.code and "lightning_indexer_scores" in graph.code
    checks.compiles_once_for_two_sizes(step, small, large)


@pytest.mark.kernels_ci
@pytest.mark.skipif(not _TRACES, reason=_NO_TRACE)
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "lightning_indexer")
    assert checks.public_op_classes(ops, f._lightning_indexer_jax, *_op_args(_tensors(), 32), chip="v7x") == {
        "PallasTpuLightningIndexer"}


def _with(index: int, tensor: torch.Tensor) -> list[torch.Tensor]:
    return checks.replaced(_tensors(device="meta"), index, tensor)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    (_with(0, meta(16, 8, 128, dtype=torch.float16)), {}, TypeError, "q must be bfloat16 or float32"),
    (_with(0, meta(16, 8, dtype=torch.bfloat16)), {}, ValueError, "q must be [tokens, heads, head_dim]"),
    (_with(1, meta(16, 4, dtype=torch.bfloat16)), {}, ValueError,
     "indexer_weights must be [tokens, heads] = [16, 8], got shape (16, 4)"),
    (_with(1, meta(16, 8, dtype=torch.int32)), {}, TypeError, "indexer_weights must be bfloat16 or float32"),
    (_with(2, meta(8, 32, 4, 256, dtype=torch.int8)), {}, TypeError, "cache_kv must be uint8, got torch.int8"),
    (_with(2, meta(8, 128, 256, dtype=torch.uint8)), {}, ValueError, "cache_kv must be [pages, page_size / 4, 4,"),
    (_with(3, meta(2, dtype=torch.int64)), {}, TypeError, "seq_lens must be int32, got torch.int64"),
    (_with(4, meta(2, 4, dtype=torch.int32)), {}, ValueError,
     "page_indices must be [max_num_seqs * pages_per_seq], got shape (2, 4)"),
    (_with(5, meta(2, dtype=torch.int32)), {}, ValueError,
     "cu_q_lens must have one entry more than seq_lens (2 + 1), got shape (2,)"),
    (_with(6, meta(2, dtype=torch.int32)), {}, ValueError, "distribution must be [3] = [3], got shape (2,)"),
    (_tensors(device="meta"), {"k": 24}, ValueError, "k must be a positive multiple of 16, at most 4096"),
    (_tensors(device="meta"), {"k": 32, "compression_ratio": 3}, ValueError,
     "compression_ratio must be a power of 2, got 3"),
    (_tensors(device="meta"), {"k": 32, "kv_layout": "nhs"}, ValueError, "kv_layout must be one of"),
    (_tensors(device="meta"), {"k": 32, "cp_size": 2, "cp_rank": 2}, ValueError,
     "cp_rank must be in [0, cp_size = 2), got 2"),
    (_with(3, torch.zeros(2, dtype=torch.int32)), {}, ValueError, "all tensors must be on one device"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, args, kwargs, error, message):
    kwargs = {"k": 32, **kwargs}
    with pytest.raises(error, match="tokamax lightning_indexer: ") as info:
        ops.lightning_indexer(*args, **kwargs)
    assert message in str(info.value)
