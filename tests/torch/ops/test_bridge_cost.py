"""What the Torch ops run around their exported JAX functions, counted on CPU tensors with a dispatch mode: each
op torch-tpu dispatches is one more executable and, for a full-size tensor, one more pass over HBM (issue 71: the
bridge cost 14-22% over the JAX path on the v5e). The loss ops whose gradients come out of the forward scale them in
one pass each, only those autograd asks for, exactly as the float32 product of the unrounded gradient rounded
once."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import checks

ROWS, HIDDEN, VOCAB, CHUNK = 64, 128, 256, 64  # the chunked scheme (plain XLA on CPU: quick)
VIEWS = {"detach", "view", "alias", "_unsafe_view", "reshape", "t", "transpose", "expand"}


class Outputs(TorchDispatchMode):
    """Each op a block dispatches, by name (no namespace), with the element counts of the tensors it made."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        self.made.append((func.name().split("::")[-1], tuple(t.numel() for t in flat if isinstance(t, torch.Tensor))))
        return out

    def count(self, name: str) -> int:
        """Calls of the op `name`, any overload."""
        return sum(1 for n, _ in self.made if n.split(".")[0] == name)

    def making(self, numel: int) -> collections.Counter:
        """The ops that made a tensor of `numel` elements, counted (views, which move no data, left out)."""
        return collections.Counter(n for n, sizes in self.made if numel in sizes and n.split(".")[0] not in VIEWS)


def _head(tokamax: Any, *, bias: bool, x_grad: bool = True, w_grad: bool = True) -> tuple:
    x = checks.randn(ROWS, HIDDEN, seed=71, scale=HIDDEN ** -0.5, dtype=torch.bfloat16).requires_grad_(x_grad)
    w = checks.randn(VOCAB, HIDDEN, seed=72, dtype=torch.bfloat16).requires_grad_(w_grad)
    b = checks.randn(VOCAB, seed=73).requires_grad_(w_grad) if bias else None
    targets = torch.from_numpy(checks.rng(74).integers(0, VOCAB, size=ROWS)).to(torch.int32)
    weights = torch.ones(ROWS)
    return x, w, b, targets, weights, tokamax.lm_head.IDENTITY


def _backward(ops: Any, tokamax: Any, cotangent: torch.Tensor, **kw: Any) -> tuple[Outputs, tuple]:
    x, w, b, targets, weights, transform = _head(tokamax, **kw)
    loss = ops.lm_head_cross_entropy(x, w, b, targets, weights, transform, chunk=CHUNK)
    with Outputs() as seen:
        loss.backward(cotangent)
    return seen, (x, w, b, targets, weights, transform)


@pytest.mark.kernels_ci
def test_the_fused_loss_backward_scales_each_gradient_in_one_pass(ops, tokamax):
    """The backward of `lm_head_cross_entropy` (gradients from the forward) makes one tensor of dW's size, the scaled
    dW: not a float32 copy, a float32 product and a cast back (three passes over a 1 GB dW at Llama 3's head, 4.2 GB
    of temporaries), nor autograd's zeros for the op's other outputs (the saved gradients themselves); dx likewise."""
    seen, _ = _backward(ops, tokamax, torch.tensor(1.0 / 3.0), bias=False)
    assert seen.making(VOCAB * HIDDEN) == {"forward_grads_scale": 1}, seen.made
    assert seen.making(ROWS * HIDDEN) == {"forward_grads_scale": 1}, seen.made
    assert seen.count("_to_copy") == seen.count("mul") == seen.count("zeros") == 0, seen.made


@pytest.mark.kernels_ci
@pytest.mark.parametrize(("kw", "scaled"), [
    (dict(bias=False), 2),  # dx, dW: the op's db of zeros is never returned
    (dict(bias=True), 3),
    (dict(bias=False, w_grad=False), 1),  # a frozen head: the dx-only op
    (dict(bias=False, x_grad=False), 1),  # x needs none: dW alone
], ids=["no-bias", "bias", "frozen-head", "x-frozen"])
def test_only_the_gradients_autograd_asks_for_are_scaled(ops, tokamax, kw, scaled):
    seen, (x, w, b, *_) = _backward(ops, tokamax, torch.tensor(2.0), **kw)
    assert seen.count("forward_grads_scale") == scaled, seen.made
    for t in (x, w, b):
        if t is not None:
            assert (t.grad is not None) == t.requires_grad


@pytest.mark.kernels_ci
@pytest.mark.parametrize("bias", [False, True])
def test_the_scaled_gradients_are_the_float32_product_rounded_once(ops, tokamax, bias):
    """Bit for bit the op's unrounded gradients (dx float32, dW's float32 accumulator at these sizes, db float32) in
    float32 times the cotangent, rounded once to each input's dtype (bf16 x and w, the bias's float32), at a cotangent
    bf16 cannot hold (1/3: a scale rounded to bf16 first would differ, and so did the bf16 gradients the op made
    before, scaled: two roundings)."""
    cotangent = torch.tensor(1.0 / 3.0)
    _, (x, w, b, targets, weights, transform) = _backward(ops, tokamax, cotangent, bias=bias)
    raw = ops.lm_head_loss_grads_op(x.detach(), w.detach(), None if b is None else b.detach(), targets, weights,
                                    transform.pre, transform.tanh, transform.post, 0.0, 0.0, CHUNK)
    dx, dw, dw_low, db = raw[1:]
    assert dx.dtype == dw.dtype == torch.float32 and dw_low.shape == (0,)  # no pair at these sizes
    for name, leaf, g in (("dx", x, dx), ("dw", w, dw), ("db", b, db)):
        if leaf is None:
            continue
        want = (g * cotangent).to(leaf.dtype)
        assert leaf.grad.dtype == want.dtype and torch.equal(leaf.grad, want), name
