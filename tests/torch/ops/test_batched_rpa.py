"""The Torch batched ragged paged attention op (`batched_rpa`): TPU only (JAX's interpreter cannot run the
kernel, tests/jax/cases/batched_rpa.py), so no values on CPU; its fake against JAX's shapes, symbolic sizes,
one graph for two token counts, upstream's Op in the TPU lowering, the CPU refusal and the argument checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.jax.cases import batched_rpa as cases

from . import checks

# The op's options after the tensors, in its order, at batched_rpa's defaults.
_DEFAULTS = {"cp_rank": None, "sm_scale": 1.0, "sliding_window": None, "soft_cap": None, "mask_value": None,
             "q_scale": None, "k_scale": None, "v_scale": None, "skip_kv_update": False,
             "kv_layout": "head_along_sublane", "decode_query_size": 1, "cp_group_size": None,
             "attention_scope": "full"}


def _tensors(tokens: int = 16, hq: int = 4, hkv: int = 2, d: int = 128, pages: int = 8, page: int = 16,
             seqs: int = 2, per_seq: int = 4, device: str = "cpu") -> list[torch.Tensor]:
    """Zero tensors of the op's layout: queries, keys, values, kv_cache, kv_lens, page_indices, cu_q_lens,
    distribution (the shapes of tests/jax/cases/batched_rpa.py by default)."""
    bf16 = {"dtype": torch.bfloat16, "device": device}
    i32 = {"dtype": torch.int32, "device": device}
    return [torch.zeros(tokens, hq, d, **bf16), torch.zeros(tokens, hkv, d, **bf16),
            torch.zeros(tokens, hkv, d, **bf16), torch.zeros(pages, page, 2 * hkv, d, **bf16),
            torch.zeros(seqs, **i32), torch.zeros(seqs * per_seq, **i32), torch.zeros(seqs + 1, **i32),
            torch.zeros(3, **i32)]


def _op_args(tensors: list[torch.Tensor], **options: object) -> list[object]:
    return [*tensors, *{**_DEFAULTS, **options}.values()]


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreters_limit(ops, tokamax):
    arrays = cases._inputs()  # a decode and a mixed sequence over a scattered paged cache
    tensors = [torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16) if a.dtype != np.int32
               else torch.from_numpy(a) for a in arrays]
    checks.refuses_on_cpu(lambda: ops.batched_rpa(*tensors, sm_scale=cases.D**-0.5), "batched_rpa")
    checks.assert_in_build_namespace(tokamax, ops.batched_rpa_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("split_cache", "options"), [
    (False, {}),
    (False, {"sm_scale": 0.125, "sliding_window": 32, "soft_cap": 30.0, "mask_value": -1e4}),
    # the cache with its heads split by bf16 packing; context parallel over the cached tokens only
    (True, {"cp_rank": torch.zeros(1, dtype=torch.int32), "cp_group_size": 2, "attention_scope": "cache_only"}),
])
def test_fake_matches_jax_shapes(ops, split_cache, options):
    tensors = _tensors()
    if split_cache:
        tensors[3] = tensors[3].unflatten(2, (2, 2))  # [pages, page_size, 2 * kv_heads / 2, 2, head_dim]
    checks.fake_matches_jax(ops, ops.batched_rpa_op, checks.family(ops, "batched_rpa")._batched_rpa_jax,
                            *_op_args(tensors, **options))


@pytest.mark.kernels_ci
def test_traces_with_symbolic_token_count_and_compiles_once(ops):
    def step(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        out, cache = ops.batched_rpa(queries, keys, values, *rest, sm_scale=0.125)
        return out.float().sum(dim=1), cache

    # Token counts equal to no other size (duck sizing would tie them to it).
    small, large = _tensors(tokens=24, device="meta"), _tensors(tokens=40, device="meta")
    graph = checks.traces_symbolically(step, *small)
    assert "batched_rpa" in graph.code
    checks.compiles_once_for_two_sizes(step, small, large)
    out, cache = ops.batched_rpa(*large)
    assert (out.shape, out.dtype, cache.shape, cache.dtype) == ((40, 4, 128), torch.bfloat16, (8, 16, 4, 128),
                                                                torch.bfloat16)


@pytest.mark.kernels_ci
def test_donates_the_kv_cache_and_nothing_else_as_upstreams_torch_op(ops):
    """torch-tpu's kernel wrapper gets donate_argnums for kv_cache (argument 3) only; the other ops donate
    nothing (upstream's Torch ops donate only here)."""
    assert list(ops.batched_rpa_op._init_fn.donate_argnums) == [3]
    others = [getattr(ops, n) for n in ops.__all__ if n.endswith("_op") and n != "batched_rpa_op"]
    assert others and all(not op._init_fn.donate_argnums for op in others)


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    # The public JAX case's shapes (tests/jax/public/batched_rpa_cases.py): 64 tokens, GQA 8/2, 4 sequences.
    args = _op_args(_tensors(tokens=64, hq=8, hkv=2, pages=32, seqs=4, per_seq=8), sm_scale=128**-0.5)
    fn = checks.family(ops, "batched_rpa")._batched_rpa_jax
    assert checks.public_op_classes(ops, fn, *args) == {"PallasTpuBatchedRpa"}


def _with(index: int, tensor: torch.Tensor) -> list[torch.Tensor]:
    tensors = _tensors(device="meta")
    tensors[index] = tensor
    return tensors


_META = {"device": "meta"}


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("args", "kwargs", "error", "message"), [
    (_with(0, torch.zeros(16, 4, 128, 1, dtype=torch.bfloat16, **_META)), {}, ValueError,
     "queries must be [tokens, num_q_heads, head_dim], got shape (16, 4, 128, 1)"),
    (_with(0, torch.zeros(16, 4, 128, dtype=torch.int32, **_META)), {}, TypeError,
     "queries must be a floating-point tensor, got torch.int32"),
    (_with(2, torch.zeros(16, 2, 128, dtype=torch.float32, **_META)), {}, TypeError,
     "keys and values must share a dtype"),
    (_with(2, torch.zeros(16, 1, 128, dtype=torch.bfloat16, **_META)), {}, ValueError,
     "values must have keys' shape (16, 2, 128), got (16, 1, 128)"),
    (_with(0, torch.zeros(8, 4, 128, dtype=torch.bfloat16, **_META)), {}, ValueError,
     "the token counts must agree: queries has 8, keys has 16"),
    (_with(0, torch.zeros(16, 4, 64, dtype=torch.bfloat16, **_META)), {}, ValueError,
     "head_dim must agree: queries has 64, keys has 128"),
    (_with(0, torch.zeros(16, 3, 128, dtype=torch.bfloat16, **_META)), {}, ValueError,
     "queries' 3 heads must be a multiple of keys' 2"),
    (_with(3, torch.zeros(8, 16, 4, dtype=torch.bfloat16, **_META)), {}, ValueError, "kv_cache must be [pages"),
    (_tensors(device="meta"), {"kv_layout": "seq_along_lane"}, ValueError,
     "kv_cache must be [pages, 2 * num_kv_heads, head_dim / packing, packing, page_size]"),
    (_with(4, torch.zeros(2, dtype=torch.int64, **_META)), {}, TypeError, "kv_lens must be int32, got torch.int64"),
    (_with(5, torch.zeros(2, 4, dtype=torch.int32, **_META)), {}, ValueError,
     "page_indices must be [max_num_seqs * pages_per_seq], got shape (2, 4)"),
    (_with(6, torch.zeros(2, dtype=torch.int32, **_META)), {}, ValueError,
     "cu_q_lens must have one entry more than kv_lens (2 + 1), got shape (2,)"),
    (_with(7, torch.zeros(4, dtype=torch.int32, **_META)), {}, ValueError, "distribution must be [3] = [3], got"),
    ([*_tensors(device="meta"), torch.zeros(1, dtype=torch.int64, **_META)], {"cp_group_size": 2}, TypeError,
     "cp_rank must be int32"),
    (_with(4, torch.zeros(2, dtype=torch.int32)), {}, ValueError, "all tensors must be on one device"),
    (_tensors(device="meta"), {"use_causal_mask": False}, ValueError, "use_causal_mask must be True"),
    (_tensors(device="meta"), {"chunk_prefill_size": 64}, ValueError, "chunk_prefill_size must be None"),
    (_tensors(device="meta"), {"kv_layout": "nhs"}, ValueError, "kv_layout must be one of"),
    (_tensors(device="meta"), {"attention_scope": "cache"}, ValueError, "attention_scope must be one of"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, args, kwargs, error, message):
    with pytest.raises(error, match="tokamax batched_rpa: ") as info:
        ops.batched_rpa(*args, **kwargs)
    assert message in str(info.value)
