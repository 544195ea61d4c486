"""The Torch DeepSeek-V4 compressor projection op (TPU only: JAX's interpreter cannot run the kernel on
CPU, tests/jax/cases/proj_and_save_state.py), with both cache layouts (int32 words, uint8 slabs): fakes
against JAX shapes, symbolic tracing, one graph for two token counts on meta tensors, upstream's Op in
the TPU lowering (v6e and v7x, the chips upstream runs it on), the CPU refusal, the namespace and
argument errors.
"""

from __future__ import annotations

import pytest
import torch

from tests.jax.cases import proj_and_save_state as cases

from . import checks

OP = "proj_and_save_state"
UPSTREAM_OP = "PallasTpuProjAndSaveState"

# As tests/jax/public/proj_and_save_state_cases.py: (tokens, hidden, state_width, lanes, tokens per page, pages,
# int32 words or uint8 slabs, dtype, compress_ratio)
LAYOUTS = {
    "int32_words-f32-sw128-h256": (13, 256, 128, 128, 8, 3, True, torch.float32, 4),
    "u8_slabs-bf16-sw256-l256-h384": (136, 384, 256, 256, 16, 10, False, torch.bfloat16, 8),
}


def _args(layout: str, tokens: int | None = None, device: str = "cpu") -> tuple:
    """Zero tensors of `layout` (its token count unless `tokens`), then compress_ratio."""
    default_tokens, hidden, width, lanes, per_page, pages, words, dtype, ratio = LAYOUTS[layout]
    tokens = default_tokens if tokens is None else tokens
    rows = per_page * 2 * width // lanes
    cache = (torch.zeros(pages, rows, lanes, dtype=torch.int32, device=device) if words
             else torch.zeros(pages, rows, 4, lanes, dtype=torch.uint8, device=device))
    return (torch.zeros(tokens, hidden, dtype=dtype, device=device),
            torch.zeros(hidden, 2 * width, dtype=dtype, device=device),
            torch.zeros(ratio, width, dtype=dtype, device=device),
            torch.zeros(tokens, dtype=torch.int32, device=device),
            torch.zeros(tokens, dtype=torch.int32, device=device), cache, ratio)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_fake_matches_jax_shapes(ops, tokamax, layout):
    f = checks.family(ops, OP)
    args = _args(layout)
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device otherwise
        out = checks.fake_matches_jax(ops, ops.proj_and_save_state_op, f._proj_jax, *args)
    assert out.shape == args[5].shape and out.dtype == args[5].dtype


@pytest.mark.kernels_ci
def test_returns_a_new_cache(ops):
    *tensors, ratio = _args("int32_words-f32-sw128-h256", device="meta")
    out = ops.proj_and_save_state(*tensors, compress_ratio=ratio)
    assert out.shape == tensors[5].shape and out.dtype == torch.int32 and out is not tensors[5]


@pytest.mark.kernels_ci
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_traces_with_symbolic_sizes_and_compiles_once(ops, layout):
    ratio = LAYOUTS[layout][-1]

    def step(*tensors: torch.Tensor) -> torch.Tensor:
        return ops.proj_and_save_state(*tensors, compress_ratio=ratio)

    def tensors(tokens: int) -> tuple[torch.Tensor, ...]:
        return _args(layout, tokens, device="meta")[:-1]

    graph = checks.traces_symbolically(step, *tensors(13))
    assert f"{OP}.default" in graph.code
    checks.compiles_once_for_two_sizes(step, tensors(13), tensors(29))  # the token count varies


@pytest.mark.kernels_ci
@pytest.mark.parametrize("chip", cases.CHIPS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_runs_upstreams_public_op(ops, chip, layout):
    f = checks.family(ops, OP)
    assert checks.public_op_classes(ops, f._proj_jax, *_args(layout), chip=chip) == {UPSTREAM_OP}


@pytest.mark.kernels_ci
def test_refuses_cpu_tensors_naming_the_interpreter_limit(ops):
    inputs = [torch.from_numpy(x) for x in cases._CSA_WORDS()]
    checks.refuses_on_cpu(lambda: ops.proj_and_save_state(*inputs, compress_ratio=4), OP)


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.proj_and_save_state_op)


def _bad(**change: object) -> dict:
    names = ("hidden_states", "wkv_wgate", "ape", "positions", "slot_mapping", "cache", "compress_ratio")
    kw = dict(zip(names, _args("int32_words-f32-sw128-h256", device="meta"), strict=True))
    kw.update(change)
    return kw


def _m(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device="meta")


BAD_CALLS = {
    "weight dtype": (_bad(wkv_wgate=_m(256, 256, dtype=torch.bfloat16)), TypeError, "must share a dtype"),
    "int hidden": (_bad(hidden_states=_m(13, 256, dtype=torch.int32)), TypeError,
                   "hidden_states must be bfloat16 or float32"),
    "hidden rank": (_bad(hidden_states=_m(13, 256, 1)), ValueError, r"hidden_states must be \[tokens, hidden_size\]"),
    "hidden sizes": (_bad(hidden_states=_m(13, 384)), ValueError, "hidden_size must agree"),
    "hidden 128s": (_bad(hidden_states=_m(13, 200), wkv_wgate=_m(200, 256)), ValueError,
                    "hidden_size must be a multiple of 128"),
    "odd weight": (_bad(wkv_wgate=_m(256, 255)), ValueError, "an even width"),
    "ape shape": (_bad(ape=_m(4, 64)), ValueError, r"ape must be \[compress_ratio, state_width\] = \[4, 128\]"),
    "compress_ratio": (_bad(compress_ratio=8), ValueError, r"ape must be \[compress_ratio, state_width\] = \[8, 128\]"),
    "int64 positions": (_bad(positions=_m(13, dtype=torch.int64)), TypeError, "positions must be int32"),
    "slot_mapping tokens": (_bad(slot_mapping=_m(12, dtype=torch.int32)), ValueError,
                            r"slot_mapping must be \[tokens\]"),
    "cache dtype": (_bad(cache=_m(3, 16, 128)), ValueError, "cache must be int32 .* or uint8"),
    "slab rows": (_bad(cache=_m(3, 16, 2, 128, dtype=torch.uint8)), ValueError, "cache must be int32 .* or uint8"),
    "cache lanes": (_bad(cache=_m(3, 16, 256, dtype=torch.int32)), ValueError, "lane count 256 must be a multiple"),
    "page rows": (_bad(cache=_m(3, 15, 128, dtype=torch.int32)), ValueError, "page_size 15 must be a multiple"),
    "devices": (_bad(ape=torch.zeros(4, 128)), ValueError, "all tensors must be on one device"),
}


@pytest.mark.kernels_ci
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_arguments_are_named(ops, case):
    kw, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=f"tokamax proj_and_save_state: .*{message}"):
        ops.proj_and_save_state(**kw)
