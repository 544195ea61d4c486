"""The Torch DeepSeek-V4 reverse-RoPE `wo_a` projection (`grouped_lowrank_proj`), run on CPU tensors in
interpret mode as TPU7x (the only chip upstream runs it on), against a float64 Torch reference written here;
the shared checks (fakes against JAX shapes, symbolic sizes, one graph for two token counts, upstream's
public Op) and the argument checks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.jax.cases import rng

from . import checks
from .test_deepseek_rope import _inputs as _rope_inputs
from .test_deepseek_rope import _rope_ref

CHIP = "v7x"
HEADS_PER_GROUP = 8
FP8_MAX = 448.0


def _inputs(tokens: int, groups: int, rank: int, head_dim: int, rotary_dim: int, seed: int) -> tuple:
    x, positions, cache = _rope_inputs((tokens, groups * HEADS_PER_GROUP, head_dim), torch.bfloat16, seed,
                                       rotary_dim=rotary_dim)
    wo_a = checks.randn(HEADS_PER_GROUP * head_dim, groups * rank, seed=seed + 1).to(torch.float8_e4m3fn)
    scale = torch.from_numpy(rng(seed + 2).uniform(0.5, 1.5, size=groups * rank).astype(np.float32))
    return x, positions, cache, wo_a, scale


def _proj_ref(x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor, wo_a: torch.Tensor,
              wo_a_scale: torch.Tensor, inverse: bool, quantize: bool) -> torch.Tensor:
    """float64: the roped heads (rounded to bf16, the kernel's activation dtype), each token's group of 8
    heads flattened to 8 * head_dim features, times that group's column block of wo_a, times the column
    scales. Quantized: per token and group, inv = bf16(448 / max|a|), codes = fp8(bf16(a * inv)) (bf16
    arithmetic, as JAX's), and the product divided by inv."""
    tokens, heads, head_dim = x.shape
    groups = heads // HEADS_PER_GROUP
    a = _rope_ref(x, positions, cache, inverse).to(torch.bfloat16).double().reshape(tokens, groups, -1)
    w = wo_a.double().reshape(HEADS_PER_GROUP * head_dim, groups, -1)  # group g: columns [g * R, (g + 1) * R)
    if quantize:
        inv = (FP8_MAX / a.abs().amax(-1, keepdim=True).clamp_min(1e-30)).to(torch.bfloat16).double()
        a = (a * inv).to(torch.bfloat16).to(torch.float8_e4m3fn).double() / inv
    out = torch.einsum("tgd,dgr->tgr", a, w) * wo_a_scale.double().reshape(groups, -1)
    return out.reshape(tokens, -1)


# ---- Values on CPU (interpret mode) ---------------------------------------------------------------
@pytest.mark.parametrize(("shape", "inverse", "quantize"), [
    ((32, 2, 256, 256, 64), True, False),
    ((16, 1, 128, 384, 32), False, True),
    ((32, 2, 256, 256, 64), True, True),
], ids=["inverse", "forward-quantized", "inverse-quantized"])
def test_projection(ops, shape, inverse, quantize):
    args = _inputs(*shape, seed=sum(shape))
    got = ops.grouped_lowrank_proj(*args, inverse=inverse, quantize_activations=quantize)
    tokens, groups, rank = shape[:3]
    assert got.dtype == torch.bfloat16 and got.shape == (tokens, groups * rank)
    want = _proj_ref(*args, inverse, quantize)
    if not quantize:
        # bf16 x fp8 products are exact, summed in f32 and scaled by the f32 scale, then rounded once to
        # bf16: half a bf16 ulp (2^-8 relative) from float64, plus f32 summation (~1e-6 of |terms|).
        torch.testing.assert_close(got.double(), want, rtol=4e-3, atol=1e-3)
        return
    # fp8 codes: the kernel's agree with the reference's except at the rare ties a one-ulp difference in
    # an f32/bf16 intermediate tips, each moving an output by one fp8 step of one term; measured: within
    # 2 bf16 ulps (2^-7 relative). The mean error stays at bf16 rounding level: a reference quantizing
    # differently (no bf16 rounding of a * inv, an f32 inv) is 4-8x further off on average.
    torch.testing.assert_close(got.double(), want, rtol=1.5e-2, atol=0.1)
    assert (got.double() - want).abs().mean() <= 2**-8 * want.abs().mean()


def test_unsupported_token_count_raises_upstreams_error(ops):
    # 200 tokens: upstream's cos/sin gather tile is 100 tokens, neither a multiple of 8 nor all of them.
    args = _inputs(200, 1, 128, 256, 64, seed=7)
    with pytest.raises(NotImplementedError, match="neither a multiple of 8 nor all the tokens"):
        ops.grouped_lowrank_proj(*args)


# ---- The shared checks --------------------------------------------------------------------------
def _meta_args(tokens: int, device: str = "meta") -> tuple[torch.Tensor, ...]:
    return (torch.zeros(tokens, 16, 256, dtype=torch.bfloat16, device=device),
            torch.zeros(tokens, dtype=torch.int32, device=device), torch.zeros(64, 64, device=device),
            torch.zeros(8 * 256, 2 * 128, dtype=torch.float8_e4m3fn, device=device),
            torch.zeros(2 * 128, device=device))


@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "grouped_lowrank_proj")
    for inverse, quantize in ((True, True), (False, False)):
        checks.fake_matches_jax(ops, ops.grouped_lowrank_proj_op, f._proj_jax, *_meta_args(32, "cpu"), inverse,
                                quantize, chip=CHIP)
    checks.assert_in_build_namespace(tokamax, ops.grouped_lowrank_proj_op)


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(*args: torch.Tensor) -> torch.Tensor:
        return ops.grouped_lowrank_proj(*args)

    checks.traces_symbolically(step, *_meta_args(32))
    checks.compiles_once_for_two_sizes(step, _meta_args(32), _meta_args(48))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "grouped_lowrank_proj")
    assert checks.public_op_classes(ops, f._proj_jax, *_meta_args(32, "cpu"), True, True,
                                    chip=CHIP) == {"PallasTpuGroupedLowrankProj"}


# ---- Argument checks ----------------------------------------------------------------------------
def _good() -> dict:
    x, positions, cache, wo_a, scale = _meta_args(16, "cpu")
    return dict(x=x, positions=positions, cos_sin_cache=cache, wo_a=wo_a, wo_a_scale=scale)


_BAD = [
    (dict(x=torch.zeros(16, 16, 256)), {}, TypeError, "x must be bfloat16"),
    (dict(x=torch.zeros(16, 4096, dtype=torch.bfloat16)), {}, ValueError, r"x must be \[tokens, groups \* 8"),
    (dict(x=torch.zeros(16, 16, 128, dtype=torch.bfloat16)), {}, ValueError, "head_dim must be a multiple of 128 a"),
    (dict(x=torch.zeros(16, 16, 320, dtype=torch.bfloat16)), {}, ValueError, "head_dim must be a multiple of 128 a"),
    (dict(x=torch.zeros(16, 12, 256, dtype=torch.bfloat16)), {}, ValueError, "heads must be a positive multiple of"),
    (dict(positions=torch.zeros(16)), {}, TypeError, "positions must be int32"),
    (dict(positions=torch.zeros(8, dtype=torch.int32)), {}, ValueError, r"positions must be \[tokens\] = \[16\]"),
    (dict(cos_sin_cache=torch.zeros(64, 64, dtype=torch.float64)), {}, TypeError, "cos_sin_cache must be float32"),
    (dict(cos_sin_cache=torch.zeros(64, 130)), {}, ValueError, "rotary_dim must be even and in"),
    (dict(wo_a=torch.zeros(2048, 256, dtype=torch.bfloat16)), {}, TypeError, "wo_a must be float8_e4m3fn"),
    (dict(wo_a=torch.zeros(2048, dtype=torch.float8_e4m3fn)), {}, ValueError, r"wo_a must be \[8 \* head_dim"),
    (dict(wo_a=torch.zeros(1024, 256, dtype=torch.float8_e4m3fn)), {}, ValueError, r"must have 8 \* head_dim = 2048"),
    (dict(wo_a=torch.zeros(2048, 255, dtype=torch.float8_e4m3fn), wo_a_scale=torch.zeros(255)), {}, ValueError,
     "columns must be a multiple of the 2 head groups"),
    (dict(wo_a_scale=torch.zeros(256, dtype=torch.bfloat16)), {}, TypeError, "wo_a_scale must be float32"),
    (dict(wo_a_scale=torch.zeros(128)), {}, ValueError, r"wo_a_scale must be \[groups \* R\] = \[256\]"),
    (dict(wo_a_scale=None), {}, TypeError, "wo_a_scale must be a torch.Tensor, got None"),
    ({}, dict(inverse=None), TypeError, "inverse must be a bool"),
    ({}, dict(quantize_activations=1), TypeError, "quantize_activations must be a bool"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("tensors", "options", "error", "message"), _BAD,
                         ids=[f"{i}-" + re.sub(r"\W+", "_", m)[:40] for i, (*_, m) in enumerate(_BAD)])
def test_bad_arguments_are_refused(ops, tensors, options, error, message):
    with pytest.raises(error, match=f"tokamax grouped_lowrank_proj: .*{message}"):
        ops.grouped_lowrank_proj(**{**_good(), **tensors}, **options)
