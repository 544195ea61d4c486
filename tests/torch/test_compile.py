"""`torch.compile(dynamic=True)` traces models that call the ops: one graph for two input sizes,
no graph break at the ops (fullgraph), forward and backward (aot_autograd), values as in eager.

The ops' fake kernels give output shapes from symbolic input sizes (torch-tpu's default fake
refuses symbolic sizes); CPU tensors then run the kernels in interpret mode.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from tests.jax.cases import rng


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(rng(seed).standard_normal(shape).astype("float32"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_gmm_forward_and_backward_compile_once_for_two_sizes(ops):
    def step(lhs: torch.Tensor, rhs: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        out = ops.gmm(lhs, rhs, sizes)
        return (out * out).sum()

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, dynamic=True, fullgraph=True)
    for m in (320, 448):  # sizes that share no value with k, n or the group count
        lhs, rhs = _randn(m, 128, seed=m).requires_grad_(), _randn(3, 128, 256, seed=1).requires_grad_()
        sizes = torch.tensor([m - 200, 0, 200], dtype=torch.int32)
        loss = compiled(lhs, rhs, sizes)
        loss.backward()
        lhs_e, rhs_e = (x.detach().clone().requires_grad_() for x in (lhs, rhs))
        step(lhs_e, rhs_e, sizes).backward()
        torch.testing.assert_close(loss, step(lhs_e.detach(), rhs_e.detach(), sizes))
        torch.testing.assert_close(lhs.grad, lhs_e.grad)
        torch.testing.assert_close(rhs.grad, rhs_e.grad)
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times for two sizes"
    assert counter.op_count >= 1


def test_splash_and_tgmm_trace_with_symbolic_sizes(ops):
    def model(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sizes: torch.Tensor) -> tuple:
        att = ops.splash_attention(q, k, v)
        flat = att.reshape(-1, att.shape[-1])
        return att, ops.tgmm(flat, flat, sizes)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    for length in (256, 384):
        q, k, v = (_randn(2, length, 128, seed=length + i) * 128**-0.5 for i in range(3))
        sizes = torch.tensor([length, length], dtype=torch.int32)
        att, grouped = compiled(q, k, v, sizes)
        att_e, grouped_e = model(q, k, v, sizes)
        assert att.shape == (2, length, 128) and grouped.shape == (2, 128, 128)
        torch.testing.assert_close(att, att_e)
        torch.testing.assert_close(grouped, grouped_e)
    assert counter.frame_count == 1, f"compiled {counter.frame_count} times for two lengths"
