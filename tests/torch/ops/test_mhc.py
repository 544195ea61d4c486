"""The Torch mHC ops (`mhc_pre`, `mhc_post`, `mhc_fused_post_pre`, DeepSeek-V4 hyper-connections), run on CPU
tensors in interpret mode (as the default emulated chip, v6e), against float64 Torch references written here;
the shared checks (fakes against JAX shapes, symbolic sizes, one graph for two token counts, upstream's
public Ops) and the argument checks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.float32_bounds import assert_float32_close
from tests.jax.cases import rng

from . import checks

GATES = (1e-6, 1e-6, 1e-6, 2.0, 20)  # DeepSeek-V4's rms_eps, hc_pre_eps, hc_sinkhorn_eps, post multiplier, iterations
# Gates (f32) against float64: the mix GEMM and the mean of squares over the streams (4 x 256 terms each),
# the softmax over a row (4) and 20 Sinkhorn rounds of a row and a column sum (4 each): float32's bound there.
F32_TERMS = 2 * 4 * 256 + 4 + 20 * 2 * 4
# bf16 streams: the kernel sums in f32 and rounds once to bf16, at most half a bf16 ulp (2^-8 relative)
# from float64; 4e-3 leaves room for the f32 arithmetic on top.
BF16_TOL = dict(rtol=4e-3, atol=1e-5)


def _inputs(tokens: int, m: int, hidden: int, seed: int) -> dict[str, torch.Tensor]:
    """DeepSeek-V4-like mHC tensors: O(1) streams, sigmoid-range post gates, row-stochastic comb mixes."""
    r = rng(seed)
    m3 = m * (m + 2)
    comb = np.abs(r.standard_normal((tokens, m, m))) + 0.01

    def f32(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(a, np.float32))

    return dict(
        x=f32(r.standard_normal((tokens, hidden))).bfloat16(),
        residual=f32(r.standard_normal((tokens, m * hidden))).bfloat16(),
        post_layer_mix=f32(2.0 / (1.0 + np.exp(-r.standard_normal((tokens, m))))),
        comb_res_mix=f32(comb / comb.sum(-1, keepdims=True)),
        fn=f32(r.standard_normal((m3, m * hidden)) * 0.02),
        hc_scale=f32(1.0 + 0.1 * r.standard_normal(3)),
        hc_base=f32(0.5 * r.standard_normal(m3)),
    )


def _pre_ref(residual: torch.Tensor, fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
             rms_eps: float, hc_pre_eps: float, hc_sinkhorn_eps: float, hc_post_mult_value: float,
             sinkhorn_repeat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 mhc_pre: gate logits from the RMS-normalised streams, sigmoid pre/post gates, a softmax comb
    matrix Sinkhorn-normalised (columns, then rows and columns per further round), the pre-weighted sum."""
    m3 = fn.shape[0]
    m = next(k for k in range(1, m3 + 1) if k * (k + 2) == m3)
    tokens, width = residual.shape
    r, s, b = residual.double(), hc_scale.double(), hc_base.double()
    logits = (r @ fn.double().T) * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + rms_eps)
    pre = torch.sigmoid(logits[:, :m] * s[0] + b[:m]) + hc_pre_eps
    post = torch.sigmoid(logits[:, m:2 * m] * s[1] + b[m:2 * m]) * hc_post_mult_value
    comb = torch.softmax(logits[:, 2 * m:].reshape(tokens, m, m) * s[2] + b[2 * m:].reshape(m, m), -1)
    comb = comb + hc_sinkhorn_eps
    comb = comb / (comb.sum(-2, keepdim=True) + hc_sinkhorn_eps)
    for _ in range(sinkhorn_repeat - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + hc_sinkhorn_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + hc_sinkhorn_eps)
    layer_input = (pre[:, :, None] * r.reshape(tokens, m, width // m)).sum(1)
    return post, comb, layer_input


def _post_ref(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor
              ) -> torch.Tensor:
    """float64 mhc_post: new stream j = post[j] * x + sum_i comb[i, j] * stream i."""
    tokens, hidden = x.shape
    m = comb_res_mix.shape[-1]
    streams = residual.double().reshape(tokens, m, hidden)
    new = torch.einsum("tij,tih->tjh", comb_res_mix.double(), streams)
    return (new + post_layer_mix.double()[:, :, None] * x.double()[:, None, :]).reshape(tokens, m * hidden)


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    if dtype == torch.float32:
        assert_float32_close(got, want, terms=F32_TERMS)
    else:
        torch.testing.assert_close(got.double(), want, **BF16_TOL)


# ---- Values on CPU (interpret mode) ---------------------------------------------------------------
def test_pre(ops):
    a = _inputs(24, 4, 256, seed=1)
    args = (a["residual"], a["fn"], a["hc_scale"], a["hc_base"])
    post_mix, comb_mix, layer_input = ops.mhc_pre(*args, *GATES)
    want = _pre_ref(*args, *GATES)
    _check(post_mix, want[0], torch.float32)
    _check(comb_mix, want[1], torch.float32)
    _check(layer_input, want[2], torch.bfloat16)


def test_post(ops):
    a = _inputs(24, 4, 256, seed=2)
    args = (a["x"], a["residual"], a["post_layer_mix"], a["comb_res_mix"])
    _check(ops.mhc_post(*args), _post_ref(*args), torch.bfloat16)


@pytest.mark.parametrize(("tokens", "m", "hidden"), [(40, 2, 512), (24, 4, 256)])
def test_fused_post_pre(ops, tokens, m, hidden):
    a = _inputs(tokens, m, hidden, seed=3)
    post_args = (a["x"], a["residual"], a["post_layer_mix"], a["comb_res_mix"])
    gate_args = (a["fn"], a["hc_scale"], a["hc_base"])
    new_residual, post_mix, comb_mix, layer_input = ops.mhc_fused_post_pre(*post_args, *gate_args, *GATES)
    _check(new_residual, _post_ref(*post_args), torch.bfloat16)
    # The pre half reads the bf16 new residual (as the unfused post then pre would): checked against the
    # reference pre of the kernel's own new residual, so one bf16 rounding flip upstream does not blur it.
    want = _pre_ref(new_residual, *gate_args, *GATES)
    _check(post_mix, want[0], torch.float32)
    _check(comb_mix, want[1], torch.float32)
    _check(layer_input, want[2], torch.bfloat16)


# ---- The shared checks --------------------------------------------------------------------------
def _meta(tokens: int, m: int = 4, hidden: int = 256, device: str = "meta") -> dict[str, torch.Tensor]:
    m3 = m * (m + 2)
    return dict(x=torch.zeros(tokens, hidden, dtype=torch.bfloat16, device=device),
                residual=torch.zeros(tokens, m * hidden, dtype=torch.bfloat16, device=device),
                post_layer_mix=torch.zeros(tokens, m, device=device),
                comb_res_mix=torch.zeros(tokens, m, m, device=device), fn=torch.zeros(m3, m * hidden, device=device),
                hc_scale=torch.zeros(3, device=device), hc_base=torch.zeros(m3, device=device))


def _pre_args(a: dict) -> tuple:
    return a["residual"], a["fn"], a["hc_scale"], a["hc_base"]


def _post_args(a: dict) -> tuple:
    return a["x"], a["residual"], a["post_layer_mix"], a["comb_res_mix"]


def _fused_args(a: dict) -> tuple:
    return (*_post_args(a), a["fn"], a["hc_scale"], a["hc_base"])


@pytest.mark.kernels_ci
@pytest.mark.parametrize("m", [1, 2, 4])
def test_fakes_match_jax_shapes(ops, tokamax, m):
    f = checks.family(ops, "mhc")
    a = _meta(40, m, 256, device="cpu")
    checks.fake_matches_jax(ops, ops.mhc_pre_op, f._pre_jax, *_pre_args(a), *GATES)
    checks.fake_matches_jax(ops, ops.mhc_post_op, f._post_jax, *_post_args(a))
    checks.fake_matches_jax(ops, ops.mhc_fused_post_pre_op, f._fused_jax, *_fused_args(a), *GATES)
    checks.assert_in_build_namespace(tokamax, ops.mhc_pre_op, ops.mhc_post_op, ops.mhc_fused_post_pre_op)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("which", ["pre", "post", "fused"])
def test_traces_with_symbolic_sizes_and_compiles_once(ops, which):
    call, args = {"pre": (lambda *t: ops.mhc_pre(*t, *GATES), _pre_args),
                  "post": (ops.mhc_post, _post_args),
                  "fused": (lambda *t: ops.mhc_fused_post_pre(*t, *GATES), _fused_args)}[which]

    def step(*tensors: torch.Tensor) -> torch.Tensor:
        out = call(*tensors)
        return out if isinstance(out, torch.Tensor) else out[-1]  # layer_input: [tokens, residual width / M]

    checks.traces_symbolically(step, *args(_meta(40)))
    checks.compiles_once_for_two_sizes(step, args(_meta(40)), args(_meta(72)))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_ops(ops):
    f = checks.family(ops, "mhc")
    a = _meta(40, device="cpu")
    assert checks.public_op_classes(ops, f._pre_jax, *_pre_args(a), *GATES) == {"PallasTpuMhcPre"}
    assert checks.public_op_classes(ops, f._post_jax, *_post_args(a)) == {"PallasTpuMhcPost"}
    assert checks.public_op_classes(ops, f._fused_jax, *_fused_args(a), *GATES) == {"PallasTpuMhcFusedPostPre"}


# ---- Argument checks ----------------------------------------------------------------------------
def _bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


_PRE_BAD = [
    (dict(residual=torch.zeros(16, 1024)), {}, TypeError, "residual must be bfloat16"),
    (dict(residual=_bf16(16, 4, 256)), {}, ValueError, r"residual must be \[tokens, M \* H\]"),
    (dict(fn=torch.zeros(24, 1024, dtype=torch.float64)), {}, TypeError, "fn must be float32"),
    (dict(hc_scale=_bf16(3)), {}, TypeError, "hc_scale must be float32"),
    (dict(fn=torch.zeros(24 * 1024)), {}, ValueError, r"fn must be \[M \* \(M \+ 2\), M \* H\]"),
    (dict(fn=torch.zeros(20, 1024)), {}, ValueError, r"fn must have M \* \(M \+ 2\) rows"),
    (dict(residual=_bf16(16, 1026)), {}, ValueError, "residual's width must be M \\* H with M=4"),
    (dict(fn=torch.zeros(24, 512)), {}, ValueError, r"fn must be \[M \* \(M \+ 2\), M \* H\] = \[24, 1024\]"),
    (dict(hc_scale=torch.zeros(2)), {}, ValueError, r"hc_scale must be \[3\]"),
    (dict(hc_base=torch.zeros(8)), {}, ValueError, r"hc_base must be \[M \* \(M \+ 2\)\] = \[24\]"),
    (dict(hc_base=None), {}, TypeError, "hc_base must be a torch.Tensor, got None"),
    (dict(hc_base=torch.zeros(24, device="meta")), {}, ValueError, "all tensors must be on one device"),
    ({}, dict(rms_eps="1e-6"), TypeError, "rms_eps must be a float"),
    ({}, dict(hc_post_mult_value=None), TypeError, "hc_post_mult_value must be a float"),
    ({}, dict(sinkhorn_repeat=0), ValueError, "sinkhorn_repeat must be an int >= 1"),
    ({}, dict(sinkhorn_repeat=2.0), ValueError, "sinkhorn_repeat must be an int >= 1"),
]

_POST_BAD = [
    (dict(x=torch.zeros(16, 256)), TypeError, "x must be bfloat16"),
    (dict(residual=torch.zeros(16, 1024)), TypeError, "residual must be bfloat16"),
    (dict(post_layer_mix=_bf16(16, 4)), TypeError, "post_layer_mix must be float32"),
    (dict(comb_res_mix=_bf16(16, 4, 4)), TypeError, "comb_res_mix must be float32"),
    (dict(x=_bf16(16, 4, 256)), ValueError, r"x must be \[tokens, H\]"),
    (dict(comb_res_mix=torch.zeros(16, 16)), ValueError, r"comb_res_mix must be \[tokens, M, M\]"),
    (dict(residual=_bf16(16, 768)), ValueError, r"residual must be \[tokens, M \* H\] = \[16, 1024\]"),
    (dict(residual=_bf16(8, 1024)), ValueError, r"residual must be \[tokens, M \* H\] = \[16, 1024\]"),
    (dict(post_layer_mix=torch.zeros(16, 2)), ValueError, r"post_layer_mix must be \[tokens, M\] = \[16, 4\]"),
    (dict(comb_res_mix=torch.zeros(16, 2, 4)), ValueError, r"comb_res_mix must be \[tokens, M, M\] = \[16, 4, 4\]"),
    (dict(x=None), TypeError, "x must be a torch.Tensor, got None"),
]


def _ids(cases: list) -> list[str]:
    return [f"{i}-" + re.sub(r"\W+", "_", case[-1])[:40] for i, case in enumerate(cases)]


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("tensors", "options", "error", "message"), _PRE_BAD, ids=_ids(_PRE_BAD))
def test_bad_pre_arguments_are_refused(ops, tensors, options, error, message):
    a = {**_meta(16, device="cpu"), **tensors}
    gates = {**dict(zip(("rms_eps", "hc_pre_eps", "hc_sinkhorn_eps", "hc_post_mult_value", "sinkhorn_repeat"),
                        GATES, strict=True)), **options}
    with pytest.raises(error, match=f"tokamax mhc_pre: .*{message}"):
        ops.mhc_pre(*_pre_args(a), **gates)
    if "residual" in tensors:  # the fused op checks its residual as mhc_post's first
        return
    with pytest.raises(error, match=f"tokamax mhc_fused_post_pre: .*{message}"):
        ops.mhc_fused_post_pre(*_post_args(_meta(16, device="cpu")), *_pre_args(a)[1:], **gates)


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("tensors", "error", "message"), _POST_BAD, ids=_ids(_POST_BAD))
def test_bad_post_arguments_are_refused(ops, tensors, error, message):
    a = {**_meta(16, device="cpu"), **tensors}
    with pytest.raises(error, match=f"tokamax mhc_post: .*{message}"):
        ops.mhc_post(*_post_args(a))
    with pytest.raises(error, match=f"tokamax mhc_fused_post_pre: .*{message}"):
        ops.mhc_fused_post_pre(*_post_args(a), *_pre_args(_meta(16, device="cpu"))[1:], *GATES)


@pytest.mark.kernels_ci
def test_fused_streams_must_agree(ops):
    a = _meta(16, m=4, hidden=256, device="cpu")
    fn, hc_base = torch.zeros(8, 1024), torch.zeros(8)  # M = 2 streams of 512 against comb's M = 4
    with pytest.raises(ValueError, match="tokamax mhc_fused_post_pre: comb_res_mix has M=4 streams but fn's 8 "
                                         "rows give M=2"):
        ops.mhc_fused_post_pre(*_post_args(a), fn, a["hc_scale"], hc_base, *GATES)
