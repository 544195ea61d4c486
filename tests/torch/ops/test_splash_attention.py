"""Torch splash attention on CPU tensors (interpret mode) against float64 Torch attention: any length
(1, 37, 129, 200, q_len != kv_len), batched and not, causal, full and local masks, GQA and MQA,
segment ids (one tensor or a pair) with a soft cap and sinks, a mask offset as an int (gradients) or
as a run-time tensor (one export for every value); one kernel call for a batch; fakes, symbolic
tracing and bad calls failing in the op's own words."""

from __future__ import annotations

import importlib

import pytest
import torch

from tests.torch import attention_reference as reference
from tests.torch.export_probe import ExportProbe

from . import checks

# f32 inputs; the kernel's online softmax reorders f32 arithmetic (differences of a few 1e-7 on
# values of order 1; gradients sum over up to 200 keys).
TOL = dict(rtol=1e-4, atol=5e-5)


def _namespace(tokamax) -> str:  # noqa: ANN001
    import importlib

    return importlib.import_module(f"{tokamax.__name__}._ops")._OPS_NAME


def _check(ops, q, k, v, allowed, *, cap=None, sinks=None, grad=True, **kw):  # noqa: ANN001, ANN202
    """The op against the reference on `allowed` rows, values and (with `grad`) every gradient."""
    leaves = [x.requires_grad_(grad) for x in (q, k, v)] + ([sinks.requires_grad_(grad)] if sinks is not None else [])
    out = ops.splash_attention(q, k, v, soft_cap=cap, sinks=sinks, **kw)
    batched = q.dim() == 4
    lift = (lambda x: x) if batched else (lambda x: x[None])
    kk, vv = k, v
    if k.dim() == q.dim() - 1:  # multi-query: one KV head
        kk, vv = k.unsqueeze(-3), v.unsqueeze(-3)
    leaves64 = [x.detach().double().requires_grad_(grad) for x in leaves]
    q64, k64, v64 = leaves64[0], leaves64[1].reshape(kk.shape), leaves64[2].reshape(vv.shape)
    ref = reference.attention(lift(q64), lift(k64), lift(v64), allowed, cap, leaves64[3] if sinks is not None else None)
    ref = ref if batched else ref[0]
    seen = allowed.any(-1) if batched else allowed[0].any(-1)  # [batch?, q_len]: rows with a key to see
    rows = seen[:, None, :, None] if batched else seen[None, :, None]
    torch.testing.assert_close(out.double() * rows, ref.detach() * rows, **TOL)
    if grad:
        cotangent = checks.randn(*out.shape, seed=99) * rows
        (out * cotangent).sum().backward()
        (ref * cotangent.double()).sum().backward()
        for name, got, want in zip(("q", "k", "v", "sinks"), leaves, leaves64, strict=False):
            torch.testing.assert_close(got.grad.double(), want.grad, **TOL, msg=lambda m, n=name: f"d{n}: {m}")
    return out


@pytest.mark.parametrize(("q_len", "kv_len", "kind", "heads"), [
    (1, 1, "causal", (2, 2)), (37, 37, "causal", (4, 2)), (129, 129, "local", (2, 2)), (200, 200, "full", (2, 1)),
    (37, 200, "causal", (2, 2)),
], ids=["1-causal", "37-causal-gqa", "129-local", "200-full-mqa", "37x200-offset"])
def test_any_length_unbatched(ops, q_len, kv_len, kind, heads):
    """Lengths the blocks do not divide are padded inside; values and gradients as unpadded float64
    attention. The 37x200 case puts the queries at offset 163 (the last 37 keys' positions)."""
    h, kv_h = heads
    window = (16, 3) if kind == "local" else None
    offset = kv_len - q_len
    q = checks.randn(h, q_len, 128, seed=1, scale=128**-0.5)
    kv_shape = (kv_len, 128) if kv_h == 1 else (kv_h, kv_len, 128)
    k, v = checks.randn(*kv_shape, seed=2, scale=128**-0.5), checks.randn(*kv_shape, seed=3)
    allowed = reference.allowed(offset + torch.arange(q_len), kv_len, kind=kind, window=window)
    _check(ops, q, k, v, allowed, causal=kind == "causal", window=window, q_offset=offset)


def test_a_window_on_a_causal_call_sees_no_key_ahead(ops):
    """causal=True (the default) with a window (16, 3): both hold, keys in [p - 16, p] (before, the
    window replaced causal and queries saw 3 keys ahead)."""
    q = checks.randn(2, 129, 128, seed=41, scale=128**-0.5)
    k, v = checks.randn(2, 129, 128, seed=42, scale=128**-0.5), checks.randn(2, 129, 128, seed=43)
    positions = torch.arange(129)
    allowed = reference.allowed(positions, 129, kind="causal") & reference.allowed(positions, 129, kind="local",
                                                                                   window=(16, 3))
    _check(ops, q, k, v, allowed, window=(16, 3))


def test_batch_with_padding_on_either_side_one_kernel_call(ops, tokamax):
    """A batch of 4 sequences of 37 tokens, left- and right-padded through segment ids, GQA with a
    soft cap and sinks: one forward and one backward op call for the whole batch."""
    batch, heads, kv_heads, length = 4, 4, 2, 37
    q = checks.randn(batch, heads, length, 128, seed=11, scale=0.3)
    k, v = checks.randn(batch, kv_heads, length, 128, seed=12, scale=0.3), checks.randn(batch, kv_heads, length, 128,
                                                                                      seed=13)
    sinks = checks.randn(heads, seed=14)
    ids = torch.ones(batch, length, dtype=torch.int32)
    ids[1, :9] = 2  # left padding
    ids[2, 30:] = 2  # right padding
    ids[3, :20] = 3  # two packed documents
    allowed = reference.allowed(torch.arange(length).expand(batch, length), length, q_ids=ids, kv_ids=ids)
    with ExportProbe(_namespace(tokamax)) as probe:
        _check(ops, q, k, v, allowed, cap=5.0, sinks=sinks, segment_ids=ids)
    assert probe.count("splash_attention") == 1 and probe.count("splash_attention_bwd") == 1, probe.calls


def test_segment_pair_and_local_window_at_an_offset(ops):
    """Different q and kv ids (a chunk of 40 queries at offset 60 against 100 keys, the first 10 keys
    another document), a local window of 24 back."""
    q = checks.randn(2, 2, 40, 128, seed=21, scale=0.3)
    k, v = checks.randn(2, 2, 100, 128, seed=22, scale=0.3), checks.randn(2, 2, 100, 128, seed=23)
    kv_ids = torch.ones(2, 100, dtype=torch.int32)
    kv_ids[:, :10] = 5
    q_ids = torch.ones(2, 40, dtype=torch.int32)
    allowed = reference.allowed(60 + torch.arange(40).expand(2, 40), 100, kind="local", window=(24, 0),
                                q_ids=q_ids, kv_ids=kv_ids)
    _check(ops, q, k, v, allowed, window=(24, 0), segment_ids=(q_ids, kv_ids), q_offset=60)


@pytest.mark.parametrize("with_sinks", [False, True], ids=["folded-heads", "sinks"])
def test_run_time_offset_serves_every_fill_level_with_one_export(ops, tokamax, with_sinks):
    """A decode step against a 300-slot cache (left-padded row, unwritten slots), then a 3-token chunk,
    at three fill levels: values as float64 attention; one export per query shape, whatever the fill."""
    batch, heads, kv_heads, slots = 2, 4, 2, 300
    k, v = checks.randn(batch, kv_heads, slots, 128, seed=31, scale=0.3), checks.randn(batch, kv_heads, slots, 128,
                                                                                      seed=32)
    sinks = checks.randn(heads, seed=33) if with_sinks else None
    with ExportProbe(_namespace(tokamax)) as probe, torch.no_grad():
        for fill in (40, 41, 170):
            for q_len in (1, 3):
                kv_ids = torch.zeros(batch, slots, dtype=torch.int32)
                kv_ids[:, :fill] = 1
                kv_ids[1, :6] = 2
                q_ids = kv_ids[:, fill - q_len:fill]
                q = checks.randn(batch, heads, q_len, 128, seed=fill + q_len, scale=0.3)
                allowed = reference.allowed((fill - q_len + torch.arange(q_len)).expand(batch, q_len), slots,
                                            q_ids=q_ids, kv_ids=kv_ids)
                offset = torch.tensor([fill - q_len], dtype=torch.int32)
                _check(ops, q, k, v, allowed, sinks=sinks, grad=False, segment_ids=(q_ids, kv_ids), q_offset=offset)
    assert probe.exports() == {"splash_attention_at": 2}, probe.exports()


def test_run_time_offset_refuses_gradients(ops):
    q = torch.zeros(1, 2, 1, 128, requires_grad=True)
    with pytest.raises(NotImplementedError, match="tokamax splash_attention: a run-time q_offset"):
        ops.splash_attention(q, torch.zeros(1, 2, 128, 128), torch.zeros(1, 2, 128, 128),
                             q_offset=torch.tensor([3], dtype=torch.int32))


_BAD_CALLS = [
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(3, 256, 128), torch.zeros(3, 256, 128)),
     ValueError, "q's 2 heads must be a multiple of k's 3"),
    (lambda o: o.splash_attention(torch.zeros(2, 256, 128), torch.zeros(256, 64), torch.zeros(256, 64)),
     ValueError, "head_dim differs: q 128, k 64"),
    (lambda o: o.splash_attention(torch.zeros(2, 2, 8, 128), torch.zeros(3, 2, 8, 128), torch.zeros(3, 2, 8, 128)),
     ValueError, "k's batch 3 differs from q's 2"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 9, 128), torch.zeros(2, 9, 128),
                                  segment_ids=torch.zeros(8, dtype=torch.int32)),
     ValueError, "one segment_ids tensor needs q_len == kv_len, got 8 and 9"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  segment_ids=torch.zeros(8)),
     TypeError, "segment_ids must be int32"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  window=(None, None)),
     ValueError, "a window needs a left or a right size"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  q_offset=1.5),
     TypeError, "q_offset must be an int or an int32 tensor"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  q_offset=torch.zeros(2, dtype=torch.int32)),
     ValueError, "a q_offset tensor holds one value"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  sinks=torch.zeros(3)),
     ValueError, "sinks must be [heads]"),
    (lambda o: o.splash_attention(torch.zeros(2, 8, 128), torch.zeros(2, 8, 128), torch.zeros(2, 8, 128),
                                  soft_cap=0.0),
     ValueError, "soft_cap must be positive"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), _BAD_CALLS, ids=[m for _, _, m in _BAD_CALLS])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax splash_attention") as info:
        call(ops)
    assert message in str(info.value)


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "splash_attention").custom_ops
    checks.assert_in_build_namespace(tokamax, ops.splash_op, ops.splash_bwd_op, ops.splash_at_op)
    q, k = torch.zeros(2, 4, 200, 128, dtype=torch.bfloat16), torch.zeros(2, 2, 37, 128, dtype=torch.bfloat16)
    q_ids, kv_ids = torch.ones(2, 200, dtype=torch.int32), torch.ones(2, 37, dtype=torch.int32)
    sinks, rows = torch.zeros(4), torch.zeros(2, 4, 200)
    calls = (((None, None), None, (True, -1, -1, 0, -1.0)), ((None, None), None, (True, 64, 0, 3, -1.0)),
             ((q_ids, kv_ids), sinks, (True, -1, -1, 0, 5.0)))
    for ids, snk, statics in calls:
        for residuals in (True, False):
            checks.fake_matches_jax(ops, ops.splash_op, f._splash_jax, q, k, k, *ids, snk, *statics, residuals)
        checks.fake_matches_jax(ops, ops.splash_bwd_op, f._splash_bwd_jax, q, k, k, *ids, snk, q, rows, q,
                                *statics)
        at_statics = (*statics[:3], statics[4])
        checks.fake_matches_jax(ops, ops.splash_at_op, f._splash_at_jax, q, k, k, *ids,
                                torch.tensor([5], dtype=torch.int32), snk, *at_statics)
    cache = importlib.import_module(f"{ops.__name__}.splash_attention.cache_op")
    checks.assert_in_build_namespace(tokamax, cache.splash_cache_op)
    for snk in (None, sinks):  # 3 new tokens (padded to 4 rows) against a 37-key cache in 128 slots, a mask
        slots = torch.zeros(2, 2, 128, 128, dtype=torch.bfloat16)
        checks.fake_matches_jax(ops, cache.splash_cache_op, cache._cache_jax, q[:, :, :4], slots, slots,
                                torch.ones(2, 128, dtype=torch.int32),
                                torch.zeros(1, dtype=torch.int32), torch.tensor([37, 3, 37, 0], dtype=torch.int32),
                                snk, True, -1, -1, -1.0, 0.125)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        return ops.splash_attention(q, k, v, segment_ids=segments, soft_cap=30.0)

    def meta(length: int) -> tuple:
        qkv = [torch.zeros(3, 2, length, 128, device="meta") for _ in range(3)]
        return (*qkv, torch.zeros(3, length, dtype=torch.int32, device="meta"))

    checks.traces_symbolically(step, *meta(37))
    checks.compiles_once_for_two_sizes(step, meta(37), meta(201))


@pytest.mark.kernels_ci
def test_lowers_to_one_kernel_for_the_batch(ops):
    """Upstream's kernel-level call (lazy mask; the whole-module identity with upstream's own call is
    the JAX tier's `tests/jax/splash`): one Mosaic kernel for a batch of 4, forward and backward."""
    f = checks.family(ops, "splash_attention").custom_ops
    q, rows = torch.zeros(4, 2, 1000, 128, dtype=torch.bfloat16), torch.zeros(4, 2, 1000)
    statics = (True, 127, 0, 0, -1.0)
    assert checks.mosaic_kernels(ops, f._splash_jax, q, q, q, None, None, None, *statics, True) == 1
    assert checks.mosaic_kernels(ops, f._splash_bwd_jax, q, q, q, None, None, None, q, rows, q, *statics) == 1
