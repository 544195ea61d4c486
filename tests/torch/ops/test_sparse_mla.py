"""The Torch sparse MLA op (`sparse_mla`): TPU7x only (JAX's interpreter cannot run its gather or attention
kernel, tests/jax/cases/sparse_mla.py), so no values on CPU; its fake against JAX's shapes, symbolic sizes,
one graph for two token counts, upstream's Op in the TPU lowering (as TPU7x), the CPU refusal and the
argument checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.jax.cases import sparse_mla as cases

from . import checks
from .checks import meta


def _tensors(tokens: int = 16, heads: int = 8, topk: int = 128, pages: int = 67, page: int = 16, seqs: int = 4,
             per_seq: int = 16, device: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> list[torch.Tensor]:
    """Zero tensors of the op's layout (tests/jax/public/sparse_mla_cases.py's shapes by default): q,
    cache_kv_nope, cache_kv_rope, topk_indices, page_indices, cu_q_lens, distribution, attention_sinks,
    swa_accumution, swa_l, swa_m."""
    i32 = {"dtype": torch.int32, "device": device}
    f32 = {"dtype": torch.float32, "device": device}
    return [torch.zeros(tokens, heads, 512, dtype=dtype, device=device), torch.zeros(pages, page, 128, **i32),
            torch.zeros(pages, page // 4, 128, **i32), torch.zeros(tokens, topk, **i32),
            torch.zeros(seqs * per_seq, **i32), torch.zeros(seqs + 1, **i32), torch.zeros(3, **i32),
            torch.zeros(heads, **f32), torch.zeros(tokens, heads, 512, dtype=dtype, device=device),
            torch.zeros(tokens, heads, **f32), torch.zeros(tokens, heads, **f32)]


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreters_limit(ops, tokamax):
    arrays = cases._inputs([1, 1, 5, 9], topk=128, num_heads=8, page_size=16, pages_per_seq=16, seed=0)
    tensors = [torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16) if a.dtype.itemsize == 2 else
               torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]  # bf16 q and swa_accumution
    checks.refuses_on_cpu(lambda: ops.sparse_mla(*tensors, sm_scale=cases.SM_SCALE), "sparse_mla")
    checks.assert_in_build_namespace(tokamax, ops.sparse_mla_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("dtype", "topk", "sm_scale"), [(torch.bfloat16, 128, 1.0), (torch.float32, 256, 0.0625)])
def test_fake_matches_jax_shapes(ops, dtype, topk, sm_scale):
    checks.fake_matches_jax(ops, ops.sparse_mla_op, checks.family(ops, "sparse_mla")._sparse_mla_jax,
                            *_tensors(topk=topk, dtype=dtype), sm_scale, chip="v7x")


@pytest.mark.kernels_ci
def test_traces_with_symbolic_token_count_and_compiles_once(ops):
    def step(*tensors: torch.Tensor) -> torch.Tensor:
        return ops.sparse_mla(*tensors, sm_scale=512**-0.5).float().sum(dim=1)

    # Token counts equal to no other size (duck sizing would tie them to it).
    small, large = _tensors(tokens=24, device="meta"), _tensors(tokens=40, device="meta")
    assert "sparse_mla" in checks.traces_symbolically(step, *small).code
    checks.compiles_once_for_two_sizes(step, small, large)
    out = ops.sparse_mla(*large)
    assert (out.shape, out.dtype, out.device.type) == ((40, 8, 512), torch.bfloat16, "meta")


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    args = (*_tensors(), 512**-0.5)
    assert checks.public_op_classes(ops, checks.family(ops, "sparse_mla")._sparse_mla_jax, *args, chip="v7x") == {
        "PallasTpuSparseMla"}


def _with(index: int, tensor: torch.Tensor) -> list[torch.Tensor]:
    return checks.replaced(_tensors(device="meta"), index, tensor)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("args", "error", "message"), [
    (_with(0, meta(16, 8, 512, dtype=torch.float16)), TypeError, "q must be bfloat16 or float32"),
    (_with(8, meta(16, 8, 512, dtype=torch.float32)), TypeError, "q and swa_accumution must share a dtype"),
    (_with(0, meta(16, 8, 576, dtype=torch.bfloat16)), ValueError,
     "q must be [tokens, heads, head_dim] = [*, *, 512], got shape (16, 8, 576)"),
    (_with(8, meta(16, 4, 512, dtype=torch.bfloat16)), ValueError,
     "swa_accumution must have q's shape (16, 8, 512), got (16, 4, 512)"),
    (_with(9, meta(16, 4, dtype=torch.float32)), ValueError,
     "swa_l must be [tokens, heads] = [16, 8], got shape (16, 4)"),
    (_with(10, meta(16, 8, dtype=torch.int32)), TypeError, "swa_m must be bfloat16 or float32, got torch.int32"),
    (_with(7, meta(4, dtype=torch.float32)), ValueError, "attention_sinks must be [heads] = [8], got shape (4,)"),
    (_with(1, meta(67, 16, 128, dtype=torch.uint8)), TypeError, "cache_kv_nope must be int32, got torch.uint8"),
    (_with(2, meta(67, 4, 4, 128, dtype=torch.int32)), ValueError,
     "cache_kv_rope must be [pages, page_size / 4, 128] = [*, *, 128], got shape (67, 4, 4, 128)"),
    (_with(2, meta(60, 4, 128, dtype=torch.int32)), ValueError,
     "the page counts must agree: cache_kv_nope has 67, cache_kv_rope has 60"),
    (_with(2, meta(67, 8, 128, dtype=torch.int32)), ValueError,
     "cache_kv_rope must hold four tokens per row: cache_kv_nope has pages of 16 tokens, cache_kv_rope 8 rows"),
    (_with(3, meta(16, 128, dtype=torch.int64)), TypeError, "topk_indices must be int32, got torch.int64"),
    (_with(3, meta(12, 128, dtype=torch.int32)), ValueError,
     "topk_indices must be [tokens, topk] = [16, *], got shape (12, 128)"),
    (_with(3, meta(16, 96, dtype=torch.int32)), ValueError,
     "topk (topk_indices' last size) must be a multiple of 128, got 96"),
    (_with(4, meta(64, dtype=torch.int64)), TypeError, "page_indices must be int32, got torch.int64"),
    (_with(5, meta(4, 2, dtype=torch.int32)), ValueError, "cu_q_lens must be [max_num_seqs + 1], got shape (4, 2)"),
    (_with(6, meta(4, dtype=torch.int32)), ValueError, "distribution must be [3] = [3], got shape (4,)"),
    (_with(7, torch.zeros(8)), ValueError, "all tensors must be on one device"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, args, error, message):
    with pytest.raises(error, match="tokamax sparse_mla: ") as info:
        ops.sparse_mla(*args)
    assert message in str(info.value)
