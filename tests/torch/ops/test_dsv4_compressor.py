"""The Torch DeepSeek-V4 compress-and-store op (TPU7x only: JAX's interpreter cannot run the kernel on
CPU, tests/jax/cases/dsv4_compressor.py), in each of its modes (CSA, the CSA indexer, HCA): fakes
against JAX shapes, symbolic tracing, one graph for two token counts on meta tensors, upstream's Op
in the v7x TPU lowering, the CPU refusal, the namespace and argument errors.
"""

from __future__ import annotations

import pytest
import torch

from tests.jax.cases import dsv4_compressor as cases

from . import checks

OP = "dsv4_compressor"
CHIP = "v7x"
UPSTREAM_OP = "PallasTpuDsv4Compressor"


def _tensors(mode: str, tokens: int, device: str = "cpu") -> dict:
    """Zero tensors shaped as the JAX cases (tests/jax/public/dsv4_compressor_cases.py; the indexer as
    upstream's `csa_indexer` cases: 32-row pages of 4 x 256 bytes, head_dim 128)."""
    i32, u8, f32 = torch.int32, torch.uint8, torch.float32

    def z(*shape: int, dt: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dt, device=device)

    cache, block_table, head_dim, max_pos, extra = {
        "csa": ((13, 64, 128, i32), 14, 512, 64, {"rope_cache": z(13, 16, 128, dt=i32)}),
        "indexer": ((5, 32, 4, 256, u8), 5, 128, 64, {}),
        "hca": ((13, 16, 4, 128, u8), 13, 512, 384, {"state_cache": z(13, 256, 4, 128, dt=u8)}),
    }[mode]
    return dict(cache=z(*cache[:-1], dt=cache[-1]), positions=z(tokens, dt=i32), block_table=z(block_table, dt=i32),
                token_to_req_indices=z(tokens, dt=i32), kv_slot_mapping=z(tokens, dt=i32),
                rms_weight=z(head_dim, dt=f32), cos_sin_cache=z(max_pos, 64, dt=f32), **extra)


OPTIONS = {
    "csa": dict(block_table_stride=7, state_block_size=4, compress_ratio=4, overlap=True, quant_block=64),
    "indexer": dict(block_table_stride=5, state_block_size=8, compress_ratio=4, overlap=True, quant_block=128),
    "hca": dict(block_table_stride=13, state_block_size=32, compress_ratio=128, overlap=False),
}
TOKENS = {"csa": 8, "indexer": 8, "hca": 4}


def _op_call(ops, mode: str, tokens: int) -> tuple:
    """(custom op, its JAX function, its positional arguments) for `mode`."""
    f = checks.family(ops, OP)
    t, o = _tensors(mode, tokens), OPTIONS[mode]
    head = (t["cache"], t["positions"], t["block_table"], t["token_to_req_indices"], t["kv_slot_mapping"],
            t["rms_weight"], t["cos_sin_cache"], t.get("state_cache"))
    if mode == "csa":
        return ops.dsv4_compressor_csa_op, f._dsv4_csa_jax, (*head, t["rope_cache"], o["block_table_stride"],
                                                             o["state_block_size"], o["compress_ratio"],
                                                             o["quant_block"], 1e-6)
    return ops.dsv4_compressor_op, f._dsv4_jax, (*head, o["block_table_stride"], o["state_block_size"],
                                                 o["compress_ratio"], o["overlap"], o.get("quant_block", 64), 1e-6)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", list(OPTIONS))
def test_fake_matches_jax_shapes(ops, tokamax, mode):
    custom_op, jax_fn, args = _op_call(ops, mode, TOKENS[mode])
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device otherwise
        out = checks.fake_matches_jax(ops, custom_op, jax_fn, *args, chip=CHIP)
    caches = out if mode == "csa" else (out,)
    assert [c.shape for c in caches] == [args[0].shape] + ([args[8].shape] if mode == "csa" else [])


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", list(OPTIONS))
def test_returns_cache_and_rope_cache_like_upstream(ops, mode):
    t = _tensors(mode, TOKENS[mode], device="meta")
    cache, rope_cache = ops.dsv4_compressor(**t, **OPTIONS[mode])
    assert cache.shape == t["cache"].shape and cache.dtype == t["cache"].dtype and cache is not t["cache"]
    if mode == "csa":
        assert rope_cache.shape == t["rope_cache"].shape and rope_cache is not t["rope_cache"]
    else:
        assert rope_cache is None


@pytest.mark.kernels_ci
def test_indexer_and_hca_ignore_a_rope_cache(ops):
    for mode in ("indexer", "hca"):
        t = _tensors(mode, TOKENS[mode], device="meta")
        assert ops.dsv4_compressor(**t, **OPTIONS[mode], rope_cache=t["cache"])[1] is None  # as upstream


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", list(OPTIONS))
def test_traces_with_symbolic_sizes_and_compiles_once(ops, mode):
    names = list(_tensors(mode, 4))

    def step(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cache, rope_cache = ops.dsv4_compressor(**dict(zip(names, tensors, strict=True)), **OPTIONS[mode])
        return (cache,) if rope_cache is None else (cache, rope_cache)

    def tensors(tokens: int) -> tuple[torch.Tensor, ...]:
        return tuple(_tensors(mode, tokens, device="meta").values())

    graph = checks.traces_symbolically(step, *tensors(8))
    assert f"{OP}_csa" in graph.code if mode == "csa" else f"{OP}.default" in graph.code
    checks.compiles_once_for_two_sizes(step, tensors(8), tensors(12))  # the token count varies


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", list(OPTIONS))
def test_runs_upstreams_public_op(ops, mode):
    _, jax_fn, args = _op_call(ops, mode, TOKENS[mode])
    assert checks.public_op_classes(ops, jax_fn, *args, chip=CHIP) == {UPSTREAM_OP}


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreter_limit(ops):
    def call(inputs: tuple, options: dict, extra: str) -> None:
        *head, last = (torch.from_numpy(x) for x in inputs)  # ..., cos_sin_cache, then rope or state cache
        ops.dsv4_compressor(*head, **{extra: last}, **options)

    checks.refuses_on_cpu(lambda: call(cases._csa_inputs(0), cases._CSA, "rope_cache"), "dsv4_compressor_csa")
    checks.refuses_on_cpu(lambda: call(cases._hca_inputs(0), cases._HCA, "state_cache"), OP)


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.dsv4_compressor_op, ops.dsv4_compressor_csa_op)


def _bad(mode: str, **change: object) -> dict:
    kw = {**_tensors(mode, 8, device="meta"), **OPTIONS[mode]}
    kw.update(change)
    return kw


def _m(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device="meta")


BAD_CALLS = {
    "int64 positions": (_bad("csa", positions=_m(8, dtype=torch.int64)), TypeError, "positions must be int32"),
    "2-D kv_slot_mapping": (_bad("csa", kv_slot_mapping=_m(8, 1)), ValueError, r"kv_slot_mapping must be \[tokens\]"),
    "token counts": (_bad("csa", token_to_req_indices=_m(7)), ValueError, "the token counts must agree"),
    "block_table stride": (_bad("csa", block_table=_m(15)), ValueError, "multiple of block_table_stride"),
    "bf16 rms_weight": (_bad("csa", rms_weight=_m(512, dtype=torch.bfloat16)), TypeError,
                        "rms_weight must be float32"),
    "head_dim": (_bad("csa", rms_weight=_m(500, dtype=torch.float32)), ValueError, "multiple of 128"),
    "rope dim": (_bad("csa", cos_sin_cache=_m(64, 32, dtype=torch.float32)), ValueError,
                 r"cos_sin_cache must be \[max_pos, 64\]"),
    "CSA cache dtype": (_bad("csa", cache=_m(13, 64, 128, dtype=torch.uint8)), ValueError,
                        r"cache must be int32 \[pages, rows, 128\] for CSA"),
    "CSA without rope_cache": (_bad("csa", rope_cache=None), ValueError, "CSA .* needs rope_cache"),
    "rope_cache rows": (_bad("csa", rope_cache=_m(13, 64, 128)), ValueError,
                        r"rope_cache must be \[pages, rows // 4, 128\]"),
    "CSA quant_block": (_bad("csa", quant_block=128), ValueError, "quant_block must be 64 for CSA"),
    "indexer cache lanes": (_bad("indexer", cache=_m(5, 32, 4, 128, dtype=torch.uint8)), ValueError,
                            r"cache must be uint8 \[pages, rows, 4, 256\] for the CSA indexer"),
    "indexer quant_block": (_bad("indexer", quant_block=96), ValueError, "quant_block must divide 128"),
    "HCA cache dtype": (_bad("hca", cache=_m(13, 16, 4, 128)), ValueError,
                        r"cache must be uint8 \[pages, rows, 4, 128\] for HCA"),
    "state_cache dtype": (_bad("hca", state_cache=_m(13, 256, 4, 128)), ValueError, "state_cache must be uint8"),
    "compress_ratio": (_bad("hca", compress_ratio=0), ValueError, "compress_ratio must be positive"),
    "devices": (_bad("hca", rms_weight=torch.zeros(512)), ValueError, "all tensors must be on one device"),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_arguments_are_named(ops, case):
    kw, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=f"tokamax dsv4_compressor: .*{message}"):
        ops.dsv4_compressor(**kw)
