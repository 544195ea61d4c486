"""The Torch DeepSeek-V4 RoPE (`deepseek_rope`: modes rope, qnorm_rope, rope_quant), run on CPU tensors in
interpret mode as TPU7x (the only chip upstream runs it on), against a float64 Torch reference written here
(the rotation as a complex multiply of channel pairs); the shared checks (fakes against JAX shapes,
symbolic sizes, one graph for two token counts, upstream's public Op) and the argument checks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.float32_bounds import assert_float32_close
from tests.jax.cases import rng

from . import checks

CHIP = "v7x"
# bf16 results: the kernel rotates in f32 and rounds once to bf16, at most half a bf16 ulp (2^-8 relative)
# from the float64 rotation; 4e-3 leaves room for the f32 arithmetic (~1e-7) on top.
BF16_TOL = dict(rtol=4e-3, atol=1e-5)
# f32: a mean of squares over the head (256 terms), an rsqrt, the rotation's two products and their sum;
# the rsqrt counted as a few ulps (XLA's is not correctly rounded): float32's bound at that length.
F32_TERMS = 256 + 8


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    if dtype == torch.float32:
        assert_float32_close(got, want, terms=F32_TERMS)
    else:
        torch.testing.assert_close(got.double(), want, **BF16_TOL)


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int, rotary_dim: int = 64, max_pos: int = 64
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, positions, cos_sin_cache) as DeepSeek-V4 lays them out: `[cos | sin]` rows of random angles."""
    r = rng(seed + 1000)
    positions = torch.from_numpy(r.integers(0, max_pos, size=(shape[0],)).astype(np.int32))
    return checks.randn(*shape, seed=seed, dtype=dtype), positions, _cos_sin_cache(max_pos, rotary_dim, seed)


def _cos_sin_cache(max_pos: int, rotary_dim: int, seed: int) -> torch.Tensor:
    angles = torch.from_numpy(rng(seed + 2000).uniform(0.0, 2 * np.pi, (max_pos, rotary_dim // 2)))
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float()


def _rope_ref(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, inverse: bool) -> torch.Tensor:
    """float64 GPT-J RoPE of the trailing rotary_dim channels: pair (2k, 2k+1) as a complex number times
    exp(+-i angle_k) of the token's position; the leading channels pass through."""
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    rows = cos_sin_cache.double()[positions.long()]
    turn = torch.complex(rows[:, :half], -rows[:, half:] if inverse else rows[:, half:])  # [tokens, half]
    if x.dim() == 3:
        turn = turn[:, None]
    xd = x.double()
    pairs = torch.view_as_complex(xd[..., -rotary_dim:].contiguous().unflatten(-1, (half, 2)))
    return torch.cat([xd[..., :-rotary_dim], torch.view_as_real(pairs * turn).flatten(-2)], dim=-1)


def _rms_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)


# ---- Values on CPU (interpret mode) ---------------------------------------------------------------
@pytest.mark.parametrize(("shape", "dtype", "inverse"), [
    ((16, 4, 256), torch.bfloat16, True),
    ((16, 256), torch.float32, False),
], ids=["bf16-heads-inverse", "f32-2d"])
def test_rope(ops, shape, dtype, inverse):
    x, positions, cache = _inputs(shape, dtype, seed=1)
    before = x.clone()
    got = ops.deepseek_rope(x, positions, cache, inverse=inverse)
    assert got.dtype == dtype and got.shape == x.shape
    _check(got, _rope_ref(x, positions, cache, inverse), dtype)
    # The NoPE channels pass through bit for bit; x is not modified (upstream's kernel writes into x's
    # buffer, but the op does not donate it).
    torch.testing.assert_close(got[..., :-64], x[..., :-64], rtol=0, atol=0)
    torch.testing.assert_close(x, before, rtol=0, atol=0)


@pytest.mark.parametrize(("dtype", "inverse"), [(torch.float32, False), (torch.bfloat16, True)])
def test_qnorm_rope(ops, dtype, inverse):
    x, positions, cache = _inputs((8, 4, 256), dtype, seed=2)
    got = ops.deepseek_rope(x, positions, cache, mode="qnorm_rope", inverse=inverse, eps=1e-6)
    assert got.dtype == dtype and got.shape == x.shape
    want = _rope_ref(_rms_normed(x, 1e-6), positions, cache, inverse)
    _check(got, want, dtype)


@pytest.mark.parametrize(("shape", "dtype", "quant_dtype"), [
    ((16, 8, 128), torch.bfloat16, None),
    ((128, 128), torch.float32, torch.float8_e5m2),
], ids=["bf16-heads-e4m3-default", "f32-2d-e5m2"])
def test_rope_quant(ops, shape, dtype, quant_dtype):
    x, positions, cache = _inputs(shape, dtype, seed=3)
    x[3] = 0  # an all-zero row: scale 0 and zero codes (not NaN)
    q, scales = ops.deepseek_rope(x, positions, cache, mode="rope_quant", quant_dtype=quant_dtype)
    qdtype = quant_dtype or torch.float8_e4m3fn
    assert q.dtype == qdtype and q.shape == x.shape
    assert scales.dtype == torch.float32 and scales.shape == x.shape[:-1]
    rotated = _rope_ref(x, positions, cache, inverse=False)  # in float32 before quantizing, as upstream
    amax = rotated.abs().amax(-1)
    want_scales = amax / torch.finfo(qdtype).max
    # One f32 max and divide: ~1e-7 relative from float64.
    torch.testing.assert_close(scales.double(), want_scales, rtol=1e-6, atol=0)
    assert (scales[3] == 0).all() and (q[3].float() == 0).all()
    # Each code is the exact scaled value rounded to quant_dtype. The kernel scales in f32 (times an f32
    # 1 / scale), so where the exact value lies within f32 rounding (1e-6 relative) of a rounding boundary
    # either neighbour is right: exact ties are common in the NoPE channels, bf16 ratios times 448 (21, say,
    # between the e4m3 codes 20 and 22). Compared as values: a zero row rotates to -0 codes too.
    scaled = torch.where(amax[..., None] > 0, rotated / want_scales.clamp_min(1e-300)[..., None], 0.0)
    code = q.double()
    below, above = ((scaled * (1 + d)).to(qdtype).double() for d in (-1e-6, 1e-6))
    assert ((code == below) | (code == above)).all()
    assert (below == above).double().mean() > 0.99  # almost every code is pinned down
    # The row maximum maps to the largest code.
    assert (q.float().abs().amax(-1)[amax > 0] == torch.finfo(qdtype).max).all()


# ---- The shared checks --------------------------------------------------------------------------
@pytest.mark.kernels_ci
def test_fakes_match_jax_shapes(ops, tokamax):
    f = checks.family(ops, "deepseek_rope")
    x, positions, cache = torch.zeros(16, 4, 256), torch.zeros(16, dtype=torch.int32), torch.zeros(64, 64)
    checks.fake_matches_jax(ops, ops.deepseek_rope_op, f._rope_jax, x, positions, cache, "rope", True, 1e-6, chip=CHIP)
    checks.fake_matches_jax(ops, ops.deepseek_rope_op, f._rope_jax, x.bfloat16(), positions, cache, "qnorm_rope", False,
                            1e-6, chip=CHIP)
    xq = torch.zeros(16, 8, 128, dtype=torch.bfloat16)
    for quant_dtype in ("float8_e4m3fn", "float8_e5m2"):
        checks.fake_matches_jax(ops, ops.deepseek_rope_quant_op, f._rope_quant_jax, xq, positions, cache, False,
                                quant_dtype, chip=CHIP)
    checks.fake_matches_jax(ops, ops.deepseek_rope_quant_op, f._rope_quant_jax, torch.zeros(128, 128),
                            torch.zeros(128, dtype=torch.int32), cache, False, "float8_e4m3fn", chip=CHIP)
    checks.assert_in_build_namespace(tokamax, ops.deepseek_rope_op, ops.deepseek_rope_quant_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", ["rope", "qnorm_rope", "rope_quant"])
def test_traces_with_symbolic_sizes_and_compiles_once(ops, mode):
    head_dim = 128 if mode == "rope_quant" else 256

    def step(x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        out = ops.deepseek_rope(x, positions, cache, mode=mode)
        return out[0] if mode == "rope_quant" else out

    def args(tokens: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(tokens, 4, head_dim, dtype=torch.bfloat16, device="meta"),
                torch.zeros(tokens, dtype=torch.int32, device="meta"), torch.zeros(64, 64, device="meta"))

    checks.traces_symbolically(step, *args(24))
    checks.compiles_once_for_two_sizes(step, args(24), args(40))


@pytest.mark.kernels_ci
@pytest.mark.parametrize("mode", ["rope", "qnorm_rope", "rope_quant"])
def test_runs_upstreams_public_op(ops, mode):
    f = checks.family(ops, "deepseek_rope")
    positions, cache = torch.zeros(16, dtype=torch.int32), torch.zeros(64, 64)
    if mode == "rope_quant":
        args = (f._rope_quant_jax, torch.zeros(16, 8, 128, dtype=torch.bfloat16), positions, cache, False,
                "float8_e4m3fn")
    else:
        args = (f._rope_jax, torch.zeros(16, 4, 256, dtype=torch.bfloat16), positions, cache, mode, False, 1e-6)
    assert checks.public_op_classes(ops, *args, chip=CHIP) == {"PallasTpuDeepseekRope"}


# ---- Argument checks ----------------------------------------------------------------------------
def _good() -> dict:
    return dict(x=torch.zeros(16, 4, 256, dtype=torch.bfloat16), positions=torch.zeros(16, dtype=torch.int32),
                cos_sin_cache=torch.zeros(64, 64))


_BAD = [
    (dict(x=torch.zeros(16, 4, 256, dtype=torch.float16)), {}, TypeError, "x must be bfloat16 or float32"),
    (dict(x=torch.zeros(16, 2, 4, 256)), {}, ValueError, r"x must be \[tokens, head_dim\] or"),
    (dict(x=torch.zeros(16, 4, 200)), {}, ValueError, "head_dim must be a positive multiple of 128"),
    (dict(positions=torch.zeros(16, dtype=torch.int64)), {}, TypeError, "positions must be int32"),
    (dict(positions=torch.zeros(8, dtype=torch.int32)), {}, ValueError, r"positions must be \[tokens\] = \[16\]"),
    (dict(cos_sin_cache=torch.zeros(64, 64, dtype=torch.bfloat16)), {}, TypeError, "cos_sin_cache must be float32"),
    (dict(cos_sin_cache=torch.zeros(64)), {}, ValueError, r"cos_sin_cache must be \[max_pos, rotary_dim\]"),
    (dict(cos_sin_cache=torch.zeros(64, 63)), {}, ValueError, "rotary_dim must be even"),
    (dict(cos_sin_cache=torch.zeros(64, 256)), {}, ValueError, r"rotary_dim must be even and in \(0, 128\]"),
    (dict(positions=[0] * 16), {}, TypeError, "positions must be a torch.Tensor"),
    (dict(cos_sin_cache=torch.zeros(64, 64, device="meta")), {}, ValueError, "all tensors must be on one device"),
    ({}, dict(mode="rotary"), ValueError, "mode must be one of"),
    ({}, dict(inverse=1), TypeError, "inverse must be a bool"),
    ({}, dict(eps=-1.0), ValueError, "eps must be a non-negative float"),
    ({}, dict(quant_dtype=torch.float8_e4m3fn), ValueError, "quant_dtype applies to mode 'rope_quant' only"),
    (dict(x=torch.zeros(16, 256)), dict(mode="qnorm_rope"), ValueError, "for mode 'qnorm_rope'"),
    (dict(x=torch.zeros(16, 4, 128)), dict(mode="qnorm_rope"), ValueError, "needs head_dim above 128"),
    ({}, dict(mode="rope_quant"), ValueError, "mode 'rope_quant' needs head_dim 128"),
    (dict(x=torch.zeros(16, 128)), dict(mode="rope_quant"), ValueError, "needs a multiple of 128 tokens"),
    (dict(x=torch.zeros(16, 4, 128)), dict(mode="rope_quant", quant_dtype=torch.int8), TypeError,
     "quant_dtype must be one of"),
    (dict(x=torch.zeros(16, 4, 128)), dict(mode="rope_quant", quant_dtype="float8"), TypeError,
     "quant_dtype must be one of"),
]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("tensors", "options", "error", "message"), _BAD,
                         ids=[f"{i}-" + re.sub(r"\W+", "_", m)[:40] for i, (*_, m) in enumerate(_BAD)])
def test_bad_arguments_are_refused(ops, tensors, options, error, message):
    with pytest.raises(error, match=f"tokamax deepseek_rope: .*{message}"):
        ops.deepseek_rope(**{**_good(), **tensors}, **options)
