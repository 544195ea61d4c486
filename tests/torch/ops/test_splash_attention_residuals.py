"""`splash_attention` computes the backward's residual (the logsumexp) only where a gradient can be asked
for, and never the max logits (upstream's backward does not read them): torch-tpu's export returns every
output of the op's JAX function, so a forward under torch.no_grad() (inference, generation's prefill) would
otherwise read the kernel's lane-broadcast float32 statistics ([batch, heads, len, 128]) back from HBM for
nothing (0.18 ms each of a 5 ms forward at 8k tokens, 32 heads, on the v5e)."""

from __future__ import annotations

import contextlib
import re

import pytest
import torch

from tests.torch import attention_reference as reference
from tests.torch import op_spy

from . import checks

STATICS = (True, -1, -1, 0, -1.0)  # causal, no window, offset 0, no soft cap
# the kernel's per-row statistics, broadcast over 128 lanes in float32 (the forward's padded length)
LANE_STATS = re.compile(r"tensor<2x4x\d+x128xf32>")


def _stats_readers(text: str) -> list[str]:
    """The module's lines that use the kernel's lane-broadcast statistics, the kernel call itself left out."""
    return [line.strip() for line in text.splitlines() if LANE_STATS.search(line) and "tpu_custom_call" not in line]


@pytest.mark.parametrize("segments", [False, True], ids=["plain", "segments+sinks"])
def test_the_no_grad_export_reads_no_residuals(ops, segments):
    """Exported for TPU as torch-tpu exports it: without residuals nothing but the kernel touches its float32
    statistics and the op returns an empty [batch, heads, 0]; with them, one slice (the logsumexp's lane 0): the
    max logits, which JAX's one program drops, are not read back either."""
    f = checks.family(ops, "splash_attention").custom_ops
    q = torch.zeros(2, 4, 1000, 128, dtype=torch.bfloat16)
    k = torch.zeros(2, 2, 1000, 128, dtype=torch.bfloat16)
    ids = torch.ones(2, 1000, dtype=torch.int32) if segments else None
    sinks = torch.zeros(4) if segments else None
    texts = {residuals: checks.tpu_export(ops, f._splash_jax, q, k, k, ids, ids, sinks, *STATICS, residuals)
             for residuals in (False, True)}
    for text in texts.values():
        assert text.count("@tpu_custom_call(") == 1
    assert _stats_readers(texts[False]) == [], _stats_readers(texts[False])
    assert "-> (tensor<2x4x1000x128xbf16>" in texts[False] and "tensor<2x4x0xf32>" in texts[False]
    readers = _stats_readers(texts[True])
    assert len(readers) == 1 and "stablehlo.slice" in readers[0], readers


def _case(grad: bool) -> tuple[torch.Tensor, ...]:
    """A small GQA batch with padding ids, sinks and a soft cap (CPU, float32)."""
    q = checks.randn(2, 4, 37, 128, seed=51, scale=0.3).requires_grad_(grad)
    k = checks.randn(2, 2, 37, 128, seed=52, scale=0.3).requires_grad_(grad)
    v = checks.randn(2, 2, 37, 128, seed=53).requires_grad_(grad)
    sinks = checks.randn(4, seed=54).requires_grad_(grad)
    ids = torch.ones(2, 37, dtype=torch.int32)
    ids[1, :5] = 2
    return q, k, v, sinks, ids


def test_no_grad_output_equals_the_grad_paths_and_gradients_still_flow(ops):
    """The same kernel either way: bit-equal outputs; with inputs that need gradients the backward runs
    (values as float64 attention)."""
    q, k, v, sinks, ids = _case(grad=True)
    with torch.no_grad():
        plain = ops.splash_attention(q, k, v, segment_ids=ids, sinks=sinks, soft_cap=5.0)
    out = ops.splash_attention(q, k, v, segment_ids=ids, sinks=sinks, soft_cap=5.0)
    assert torch.equal(plain, out.detach())
    cotangent = checks.randn(*out.shape, seed=55)
    (out * cotangent).sum().backward()
    leaves64 = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    allowed = reference.allowed(torch.arange(37).expand(2, 37), 37, q_ids=ids, kv_ids=ids)
    ref = reference.attention(*leaves64[:3], allowed, 5.0, leaves64[3])
    (ref * cotangent.double()).sum().backward()
    for name, got, want in zip("qkvs", (q, k, v, sinks), leaves64, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-4, atol=5e-5,
                                   msg=lambda m, n=name: f"d{n}: {m}")


def test_residual_free_outputs_are_empty(ops):
    """CPU tensors through the op itself: the logsumexp [batch, heads, 0] without residuals, [batch, heads, len]
    with; out and the logsumexp alone."""
    q, k, v, sinks, ids = _case(grad=False)
    for residuals, rows in ((False, 0), (True, 37)):
        out, lse = ops.splash_op(q, k, v, ids, ids, sinks, *STATICS, residuals)
        assert out.shape == q.shape and lse.shape == (2, 4, rows) and lse.dtype == torch.float32


def _residual_flags(ops) -> contextlib.AbstractContextManager[list[bool]]:  # noqa: ANN001
    """The `residuals` argument of every `splash_op` call made in the block (the token is the last argument)."""
    return op_spy.arguments(ops.splash_op, -2)


def _meta(grad: tuple[bool, ...] = (False, False, False, False)) -> tuple[torch.Tensor, ...]:
    shapes = ((1, 2, 128, 128),) * 3 + ((2,),)
    return tuple(torch.empty(*s, device="meta", requires_grad=g) for s, g in zip(shapes, grad, strict=True))


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("grad", "no_grad_block", "want"), [
    ((True, True, True, False), True, False),  # torch.no_grad(): nothing can be asked for
    ((False, False, False, False), False, False),  # inference tensors
    ((True, True, True, False), False, True),
    ((False, False, False, True), False, True),  # sinks alone
], ids=["no_grad", "no-input-needs-grad", "qkv-need-grad", "sinks-need-grad"])
def test_the_residual_free_variant_runs_where_no_gradient_can_be_asked_for(ops, grad, no_grad_block, want):
    q, k, v, sinks = _meta(grad)
    with _residual_flags(ops) as seen, torch.no_grad() if no_grad_block else contextlib.nullcontext():
        out = ops.splash_attention(q, k, v, sinks=sinks)
    assert seen == [want] and out.shape == q.shape


@pytest.mark.kernels_ci
def test_a_gradient_through_a_residual_free_call_is_refused(ops):
    q, k, v, sinks = _meta((True, False, False, False))
    out, _ = ops.splash_op(q, k, v, None, None, sinks, *STATICS, False)
    with pytest.raises(RuntimeError, match="tokamax splash_attention: a gradient through a call made with "
                                           "residuals=False"):
        out.sum().backward()
