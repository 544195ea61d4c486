"""The Torch masked-dense MLA op (`masked_dense_mla`): TPU7x only (JAX's interpreter cannot run the kernel,
tests/jax/cases/masked_dense_mla.py), so no values on CPU; its fake against JAX's shapes, symbolic sizes, one
graph for two token counts, upstream's Op in the TPU lowering (as TPU7x), the CPU refusal and the argument
checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.jax.cases import masked_dense_mla as cases

from . import checks
from .checks import meta

# The op's options after the tensors, in its order, at masked_dense_mla's defaults.
_DEFAULTS = {"sequence_start": None, "sm_scale": 1.0, "k_scale": 1.0, "mask_value": None, "max_kv_len": None,
             "chunk_prefill_size": None}


def _tensors(tokens: int = 12, heads: int = 8, topk: int = 128, pages: int = 34, page: int = 16, seqs: int = 4,
             per_seq: int = 8, device: str = "cpu") -> list[torch.Tensor]:
    """Zero tensors of the op's layout (tests/jax/public/masked_dense_mla_cases.py's shapes by default): q,
    cache_kv_nope, cache_kv_rope, kv_lens, topk_indices, page_indices, cu_q_lens, distribution."""
    u8 = {"dtype": torch.uint8, "device": device}
    i32 = {"dtype": torch.int32, "device": device}
    return [torch.zeros(tokens, heads, 576, dtype=torch.bfloat16, device=device),
            torch.zeros(pages, page, 4, 128, **u8), torch.zeros(pages, page // 4, 4, 128, **u8),
            torch.zeros(seqs, **i32), torch.zeros(tokens, topk, **i32), torch.zeros(seqs * per_seq, **i32),
            torch.zeros(seqs + 1, **i32), torch.zeros(3, **i32)]


def _op_args(tensors: list[torch.Tensor], **options: object) -> list[object]:
    return [*tensors, *{**_DEFAULTS, **options}.values()]


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreters_limit(ops, tokamax):
    arrays = cases._inputs([1, 1, 3, 7], topk=128, num_heads=8, page_size=16, pages_per_seq=8, seed=0)
    tensors = [torch.from_numpy(a) if a.dtype in (np.uint8, np.int32) else
               torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16) for a in arrays]
    checks.refuses_on_cpu(lambda: ops.masked_dense_mla(*tensors, sm_scale=cases.SM_SCALE), "masked_dense_mla")
    checks.assert_in_build_namespace(tokamax, ops.masked_dense_mla_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("topk", "options"), [
    (128, {}),  # topk covers every cached position: the causal mask is built in the kernel
    (32, {"sm_scale": 576**-0.5, "k_scale": 0.5, "mask_value": -1e9, "max_kv_len": 96}),  # a SparseCore bitmap
])
def test_fake_matches_jax_shapes(ops, topk, options):
    checks.fake_matches_jax(ops, ops.masked_dense_mla_op, checks.family(ops, "masked_dense_mla")._masked_dense_mla_jax,
                            *_op_args(_tensors(topk=topk), **options), chip="v7x")


@pytest.mark.kernels_ci
def test_traces_with_symbolic_token_count_and_compiles_once(ops):
    def step(q: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return ops.masked_dense_mla(q, *rest, sm_scale=576**-0.5).float().sum(dim=1)

    # Token counts equal to no other size (duck sizing would tie them to it).
    small, large = _tensors(tokens=20, device="meta"), _tensors(tokens=44, device="meta")
    assert "masked_dense_mla" in checks.traces_symbolically(step, *small).code
    checks.compiles_once_for_two_sizes(step, small, large)
    out = ops.masked_dense_mla(*large)
    assert (out.shape, out.dtype, out.device.type) == ((44, 8, 576), torch.bfloat16, "meta")


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "masked_dense_mla")
    args = _op_args(_tensors(topk=32), sm_scale=576**-0.5)
    assert checks.public_op_classes(ops, f._masked_dense_mla_jax, *args, chip="v7x") == {"PallasTpuMaskedDenseMla"}


def _with(index: int, tensor: torch.Tensor) -> list[torch.Tensor]:
    return checks.replaced(_tensors(device="meta"), index, tensor)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    (_with(0, meta(12, 8, 576, dtype=torch.float16)), {}, TypeError, "q must be bfloat16 or float32"),
    (_with(0, meta(12, 8, 512, dtype=torch.bfloat16)), {}, ValueError,
     "q must be [tokens, heads, head_dim] = [*, *, 576], got shape (12, 8, 512)"),
    (_with(1, meta(34, 16, 4, 128, dtype=torch.int8)), {}, TypeError, "cache_kv_nope must be uint8, got torch.int8"),
    (_with(2, meta(34, 4, 512, dtype=torch.uint8)), {}, ValueError,
     "cache_kv_rope must be [pages, page_size / 4, 4, 128] = [*, *, 4, 128], got shape (34, 4, 512)"),
    (_with(2, meta(30, 4, 4, 128, dtype=torch.uint8)), {}, ValueError,
     "the page counts must agree: cache_kv_nope has 34, cache_kv_rope has 30"),
    (_with(2, meta(34, 16, 4, 128, dtype=torch.uint8)), {}, ValueError,
     "cache_kv_rope must hold four tokens per row: cache_kv_nope has pages of 16 tokens, cache_kv_rope 16 rows"),
    (_with(4, meta(12, 128, dtype=torch.int64)), {}, TypeError, "topk_indices must be int32, got torch.int64"),
    (_with(4, meta(10, 128, dtype=torch.int32)), {}, ValueError,
     "the token counts must agree: q has 12, topk_indices has 10"),
    (_with(3, meta(4, dtype=torch.int64)), {}, TypeError, "kv_lens must be int32, got torch.int64"),
    (_with(5, meta(4, 8, dtype=torch.int32)), {}, ValueError,
     "page_indices must be [max_num_seqs * pages_per_seq], got shape (4, 8)"),
    (_with(6, meta(4, dtype=torch.int32)), {}, ValueError,
     "cu_q_lens must have one entry more than kv_lens (4 + 1), got shape (4,)"),
    (_with(7, meta(2, dtype=torch.int32)), {}, ValueError, "distribution must be [3] = [3], got shape (2,)"),
    (_tensors(device="meta"), {"sequence_start": meta(1, dtype=torch.int32)}, ValueError,
     "sequence_start must be a scalar = [], got shape (1,)"),
    (_tensors(device="meta"), {"max_kv_len": 0}, ValueError, "max_kv_len must be positive, got 0"),
    (_with(3, torch.zeros(4, dtype=torch.int32)), {}, ValueError, "all tensors must be on one device"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, args, kwargs, error, message):
    with pytest.raises(error, match="tokamax masked_dense_mla: ") as info:
        ops.masked_dense_mla(*args, **kwargs)
    assert message in str(info.value)
