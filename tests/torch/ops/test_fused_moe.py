"""The Torch fused MoE layer on CPU tensors (interpret mode) against a dense float64 Torch MoE (softmax router,
top-k, renormalisation, gated MLP per expert): bf16 weights with biases, fp8 weights with per-channel scales,
the GPT-OSS activation; the shared checks (fake against JAX shapes, symbolic tracing, one graph for two token
counts, the public Op in the lowering) and bad calls."""

from __future__ import annotations

import pytest
import torch

from . import checks

# as tests/jax/cases/fused_moe.py
TOKENS, HIDDEN, INTER, EXPERTS = 32, 256, 256, 4


def _operands(tokens: int = TOKENS, x_dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    x = checks.randn(tokens, HIDDEN, seed=1, dtype=x_dtype)
    w1 = checks.randn(EXPERTS, HIDDEN, 2 * INTER, seed=2, scale=1 / 16, dtype=torch.bfloat16)
    w2 = checks.randn(EXPERTS, INTER, HIDDEN, seed=3, scale=1 / 16, dtype=torch.bfloat16)
    gating = checks.randn(tokens, EXPERTS, seed=4)
    return x, w1, w2, gating


def _fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 e4m3 weights with one float32 scale per (expert, output channel)."""
    w = w.float()
    scale = w.abs().amax(dim=1) / 448.0  # e4m3's largest finite value
    return (w / scale[:, None, :]).to(torch.float8_e4m3fn), scale


def _act(gate: torch.Tensor, up: torch.Tensor, act_fn: str) -> torch.Tensor:
    if act_fn == "silu":
        return torch.nn.functional.silu(gate) * up
    assert act_fn == "swigluoai"  # GPT-OSS: clipped gate and up, gate * sigmoid(1.702 gate) * (up + 1)
    gate, up = gate.clamp(max=7.0), up.clamp(-7.0, 7.0)
    return gate * torch.sigmoid(1.702 * gate) * (up + 1.0)


def _reference(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gating: torch.Tensor,
               w1_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
               w1_bias: torch.Tensor | None = None, w2_bias: torch.Tensor | None = None, *, topk: int = 2,
               renormalize: bool = True, act_fn: str = "silu") -> torch.Tensor:
    """Dense MoE in float64: every expert on every token, weighted by the (renormalised) top-k softmax."""
    probs = torch.softmax(gating.double(), dim=-1)
    top, chosen = probs.topk(topk, dim=-1)
    if renormalize:
        top = top / top.sum(dim=-1, keepdim=True)
    weights = torch.zeros_like(probs).scatter(1, chosen, top)  # [tokens, experts], zero off the top-k
    out = torch.zeros(x.shape, dtype=torch.float64)
    for e in range(w1.shape[0]):
        w1e, w2e = w1[e].double(), w2[e].double()
        if w1_scale is not None:
            w1e, w2e = w1e * w1_scale[e].double(), w2e * w2_scale[e].double()
        h = x.double() @ w1e + (0 if w1_bias is None else w1_bias[e].double())
        inter = h.shape[1] // 2
        row = _act(h[:, :inter], h[:, inter:], act_fn) @ w2e + (0 if w2_bias is None else w2_bias[e].double())
        out += weights[:, e:e + 1] * row
    return out


def test_bf16_weights_with_biases_match_torch(ops):
    x, w1, w2, gating = _operands()
    w1_bias = checks.randn(EXPERTS, 1, 2 * INTER, seed=5, scale=0.25)
    w2_bias = checks.randn(EXPERTS, 1, HIDDEN, seed=6, scale=0.25)
    out = ops.fused_moe(x, w1, w2, gating, w1_bias=w1_bias, w2_bias=w2_bias)
    want = _reference(x, w1, w2, gating, w1_bias=w1_bias, w2_bias=w2_bias)
    # bf16 rows and weights (the reference takes the same values), f32 accumulation; the kernel rounds the
    # intermediate and the output to bf16 (outputs up to ~2.3: 1-2 bf16 ulp, 2^-7 each).
    assert out.dtype == torch.bfloat16 and out.shape == (TOKENS, HIDDEN)
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


def test_fp8_weights_with_scales_without_renormalisation_match_torch(ops):
    x, w1, w2, gating = _operands()
    (w1_q, w1_scale), (w2_q, w2_scale) = _fp8(w1), _fp8(w2)
    out = ops.fused_moe(x, w1_q, w2_q, gating, w1_scale, w2_scale, renormalize=False)
    want = _reference(x, w1_q, w2_q, gating, w1_scale, w2_scale, renormalize=False)
    # The reference takes the fp8 weights as given, but the kernel also quantizes the token rows and the
    # intermediate to fp8 e4m3 (3 mantissa bits: up to 2^-4 relative per element); outputs up to ~2.
    torch.testing.assert_close(out.double(), want, rtol=0.1, atol=0.2)
    # not the renormalised result: the option reaches the kernel
    assert (out.double() - _reference(x, w1_q, w2_q, gating, w1_scale, w2_scale)).abs().max() > 0.2


def test_f32_rows_top1_and_gpt_oss_activation_match_torch(ops):
    x, w1, w2, gating = _operands(x_dtype=torch.float32)
    out = ops.fused_moe(x, w1, w2, gating, topk=1, act_fn="swigluoai")
    # The kernel routes bf16 rows: compare with the reference on the bf16-rounded rows. Output f32, the
    # intermediate still bf16 in the kernel (1-2 bf16 ulp of values up to ~3).
    want = _reference(x.to(torch.bfloat16), w1, w2, gating, topk=1, act_fn="swigluoai")
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=3e-2)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("quantized", [False, True])
def test_fake_matches_jax_shapes(ops, tokamax, quantized):
    f = checks.family(ops, "fused_moe")
    x, w1, w2, gating = (torch.zeros_like(t) for t in _operands(tokens=48))
    scales, biases = (None, None), (None, torch.zeros(EXPERTS, 1, HIDDEN))
    if quantized:
        w1, w2 = w1.to(torch.float8_e4m3fn), w2.to(torch.float8_e4m3fn)
        scales = (torch.zeros(EXPERTS, 2 * INTER), torch.zeros(EXPERTS, HIDDEN))
    with tokamax.ops.config.cross_compile(True):  # upstream's Op refuses a CPU device unless cross-compiling
        checks.fake_matches_jax(ops, ops.fused_moe_op, f._fused_moe_jax, x, w1, w2, gating, *scales, *biases, 2, True,
                                "silu")


@pytest.mark.kernels_ci
def test_traces_with_symbolic_sizes_and_compiles_once(ops):
    def step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gating: torch.Tensor) -> torch.Tensor:
        return ops.fused_moe(x, w1, w2, gating, topk=2)

    def args(tokens: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.to("meta") for t in _operands(tokens))

    checks.traces_symbolically(step, *args(32))
    checks.compiles_once_for_two_sizes(step, args(32), args(48))


@pytest.mark.kernels_ci
def test_runs_upstreams_public_op(ops):
    f = checks.family(ops, "fused_moe")
    x, w1, w2, gating = (torch.zeros_like(t) for t in _operands())
    assert checks.public_op_classes(ops, f._fused_moe_jax, x, w1, w2, gating, None, None, None, None, 2, True,
                                    "silu") == {"PallasMosaicTpuFusedMoe"}


@pytest.mark.kernels_ci
def test_in_build_namespace(ops, tokamax):
    checks.assert_in_build_namespace(tokamax, ops.fused_moe_op)


def _call(**kw):  # noqa: ANN003, ANN202
    """A call with the defaults replaced by `kw` (tensors or options)."""
    def call(o):  # noqa: ANN001, ANN202
        args = dict(zip(("x", "w1", "w2", "gating"), (torch.zeros_like(t) for t in _operands()), strict=True))
        args.update(kw)
        return o.fused_moe(**args)
    return call


F8 = torch.float8_e4m3fn


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("call", "error", "message"), [
    (_call(x="x"), TypeError, "x must be a torch.Tensor, got str"),
    (_call(gating=torch.zeros(TOKENS, EXPERTS, device="meta")), ValueError, "all tensors must be on one device"),
    (_call(x=torch.zeros(TOKENS, HIDDEN, dtype=torch.float16)), TypeError, "x must be bfloat16 or float32"),
    (_call(x=torch.zeros(2, TOKENS, HIDDEN)), ValueError, "x must be [tokens, hidden], got shape (2, 32, 256)"),
    (_call(w1=torch.zeros(HIDDEN, 2 * INTER)), ValueError, "w1 must be [experts, hidden, 2 * inter], got shape"),
    (_call(w2=torch.zeros(INTER, HIDDEN)), ValueError, "w2 must be [experts, inter, hidden], got shape"),
    (_call(w1=torch.zeros(EXPERTS, HIDDEN, 2 * INTER)), TypeError, "w1 must be bfloat16 or float8_e4m3fn or int8"),
    (_call(w2=torch.zeros(EXPERTS, INTER, HIDDEN, dtype=F8)), TypeError, "w1 and w2 must share a dtype"),
    (_call(w1=torch.zeros(EXPERTS, HIDDEN, 511, dtype=torch.bfloat16)), ValueError, "(gate and up halves)"),
    (_call(w2=torch.zeros(EXPERTS, INTER, 128, dtype=torch.bfloat16)), ValueError,
     "the hidden sizes must agree: x has 256, w1 has 256, w2 has 128"),
    (_call(w2=torch.zeros(8, INTER, HIDDEN, dtype=torch.bfloat16)), ValueError,
     "the expert counts must agree: w1 has 4, w2 has 8, gating has 4"),
    (_call(w2=torch.zeros(EXPERTS, 128, HIDDEN, dtype=torch.bfloat16)), ValueError,
     "the intermediate sizes must agree: w1_half has 256, w2 has 128"),
    (_call(gating=torch.zeros(TOKENS, EXPERTS, dtype=torch.int32)), TypeError, "gating must be float32 or bfloat16"),
    (_call(gating=torch.zeros(16, EXPERTS)), ValueError, "gating must be [tokens, experts] = [32, 4], got shape"),
    (_call(w1=torch.zeros(EXPERTS, HIDDEN, 2 * INTER, dtype=F8), w2=torch.zeros(EXPERTS, INTER, HIDDEN, dtype=F8)),
     ValueError, "weights need w1_scale and w2_scale"),
    (_call(w1=torch.zeros(EXPERTS, HIDDEN, 2 * INTER, dtype=F8), w2=torch.zeros(EXPERTS, INTER, HIDDEN, dtype=F8),
           w1_scale=torch.zeros(EXPERTS, 2 * INTER), w2_scale=torch.zeros(EXPERTS, 1, HIDDEN)),
     ValueError, "w2_scale must be [experts, hidden] = [4, 256], got shape (4, 1, 256)"),
    (_call(w1=torch.zeros(EXPERTS, HIDDEN, 2 * INTER, dtype=F8), w2=torch.zeros(EXPERTS, INTER, HIDDEN, dtype=F8),
           w1_scale=torch.zeros(EXPERTS, 2 * INTER, dtype=torch.bfloat16), w2_scale=torch.zeros(EXPERTS, HIDDEN)),
     TypeError, "w1_scale must be float32, got torch.bfloat16"),
    (_call(w1_scale=torch.zeros(EXPERTS, 2 * INTER)), ValueError, "bfloat16 weights take no w1_scale or w2_scale"),
    (_call(w1_bias=torch.zeros(EXPERTS, 2 * INTER)), ValueError, "w1_bias must be [experts, 1, 2 * inter]"),
    (_call(w2_bias=torch.zeros(EXPERTS, 1, HIDDEN, dtype=torch.int32)), TypeError,
     "w2_bias must be bfloat16 or float32"),
    (_call(topk=5), ValueError, "topk must be an int in [1, experts=4], got 5"),
    (_call(topk=0), ValueError, "topk must be an int in [1, experts=4], got 0"),
    (_call(renormalize=1), TypeError, "renormalize must be a bool, got int"),
    (_call(act_fn="gelu"), ValueError, "act_fn must be one of ['silu', 'swigluoai', 'silu_and_mul_with_clamp']"),
])
def test_bad_calls_fail_with_the_ops_own_message(ops, call, error, message):
    with pytest.raises(error, match="tokamax fused_moe") as info:
        call(ops)
    assert message in str(info.value)
