"""The Torch batched ragged paged attention op (`batched_rpa`): on CPU tensors it runs upstream's pure-JAX
reference (JAX's interpreter cannot run the Mosaic kernel, tests/jax/cases/batched_rpa.py), checked here against a
float64 Torch paged attention (outputs and the cache it writes), and it refuses what that reference does not
implement; its fake against JAX's shapes, symbolic sizes, one graph for two token counts, upstream's Op in the TPU
lowering and the argument checks.
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


def _paged_attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor, kv_lens: list[int],
                         page_indices: torch.Tensor, cu_q_lens: list[int], active: int, sm_scale: float
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged attention in float64, written from the op's contract: each sequence's new keys and values go to
    positions [kv_len - q_len, kv_len) of its pages (K of head h at 2h, V at 2h + 1), then each new token attends
    causally (bottom-right) to its sequence's first kv_len positions; grouped-query heads share their KV head.
    Returns the live rows' outputs (zeros elsewhere) and the updated cache."""
    q, k, v, cache = (t.double() for t in (q, k, v, cache))
    cache = cache.clone()
    page, heads, kv_heads = cache.shape[1], q.shape[1], k.shape[1]
    per_seq = page_indices.shape[0] // len(kv_lens)
    out = torch.zeros_like(q)
    for s in range(active):
        start, end, kv_len = cu_q_lens[s], cu_q_lens[s + 1], kv_lens[s]
        pages = page_indices[s * per_seq:(s + 1) * per_seq].long()
        for i, t in enumerate(range(start, end)):
            pos = kv_len - (end - start) + i
            cache[pages[pos // page], pos % page, 0::2] = k[t]
            cache[pages[pos // page], pos % page, 1::2] = v[t]
        seq = cache[pages].flatten(0, 1)[:kv_len]  # [kv_len, 2 * kv_heads, dim]
        keys, values = seq[:, 0::2].repeat_interleave(heads // kv_heads, 1), seq[:, 1::2].repeat_interleave(
            heads // kv_heads, 1)
        for i, t in enumerate(range(start, end)):
            pos = kv_len - (end - start) + i
            scores = torch.einsum("hd,khd->hk", q[t], keys[:pos + 1]) * sm_scale
            out[t] = torch.einsum("hk,khd->hd", scores.softmax(-1), values[:pos + 1])
    return out, cache


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_cpu_runs_upstreams_reference_matching_a_float64_paged_attention(ops, tokamax, dtype, tol):
    """A decode and a mixed sequence over a scattered paged cache, 16 rows of which 9 are live (tests/jax/cases):
    the live rows' outputs and the whole updated cache against float64 paged attention."""
    arrays = cases._inputs()
    tensors = [torch.from_numpy(np.asarray(a, np.float32)).to(dtype) if a.dtype != np.int32
               else torch.from_numpy(a) for a in arrays]
    q, k, v, cache, kv_lens, page_indices, cu_q_lens, distribution = tensors
    out, new_cache = ops.batched_rpa(*tensors, sm_scale=cases.D**-0.5)
    want, want_cache = _paged_attention_f64(q, k, v, cache, kv_lens.tolist(), page_indices, cu_q_lens.tolist(),
                                            int(distribution[2]), cases.D**-0.5)
    live = int(cu_q_lens[int(distribution[2])])
    assert (out.shape, out.dtype, new_cache.shape, new_cache.dtype) == (q.shape, dtype, cache.shape, dtype)
    torch.testing.assert_close(out[:live].double(), want[:live], rtol=tol, atol=tol)
    # The cache only moves values: written slots hold the new keys and values exactly, the rest is unchanged.
    assert torch.equal(new_cache.double(), want_cache)
    assert not torch.equal(new_cache, cache)  # the call wrote something
    checks.assert_in_build_namespace(tokamax, ops.batched_rpa_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("options", [{"attention_scope": "cache_only"},
                                     {"cp_rank": torch.zeros(1, dtype=torch.int32), "cp_group_size": 2,
                                      "attention_scope": "new_tokens_only"}])
def test_cpu_refuses_what_upstreams_reference_does_not_implement(ops, options):
    tensors = [torch.from_numpy(np.asarray(a, np.float32)) if a.dtype != np.int32 else torch.from_numpy(a)
               for a in cases._inputs()]
    with pytest.raises(NotImplementedError, match="tokamax batched_rpa: on CPU tensors upstream's pure-JAX "
                                                  "reference runs, which does not implement"):
        ops.batched_rpa(*tensors, sm_scale=cases.D**-0.5, **options)


# Each case traces the Mosaic kernel (tens of seconds on CPU), so none is in the kernels_ci subset (the
# compatibility tiers check the op's fake against its JAX function through test_traces_with_symbolic_...).
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


def test_runs_upstreams_public_op(ops):
    # Not in kernels_ci: it lowers the Mosaic kernel (about a minute on CPU); the JAX tier holds this
    # call's whole module to upstream's (tests/jax/public), and test_paged_identity the Torch op's.
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
