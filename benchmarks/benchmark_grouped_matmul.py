"""Grouped matmul (the MoE experts' matmul): `tokamax.torch_ops.gmm` against what a Torch TPU
user has, torch-tpu's native `torch.tpu.ops.ragged_dot` (on CPU hosts: `torch._grouped_mm`),
forward and backward, at Mixtral-8x7B and Qwen3-30B-A3B expert shapes sized for one v5e/v6e chip.

    kernels benchmark kernels-community/tokamax@v1
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import DTYPE, ON_TPU, Workload, wait  # noqa: E402

SKIPPED: dict[str, str] = {}  # workloads this host cannot run, and why (the test reports them)


def native(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """The alternative: torch-tpu's ragged dot on a TPU, torch's grouped mm elsewhere."""
    if ON_TPU:
        return torch.tpu.ops.ragged_dot(lhs, rhs, group_sizes)
    return torch._grouped_mm(lhs, rhs, offs=torch.cumsum(group_sizes, 0, dtype=torch.int32))


class _GroupedMatmul:  # the workloads; a Benchmark only with a shape (kernels runs every subclass)
    # (tokens routed x top-k rows, hidden, expert FFN width, experts) on a TPU; tiny on CPU
    tpu_shape: tuple[int, int, int, int]
    cpu_shape = (256, 128, 256, 4)

    def setup(self) -> None:
        rows, hidden, ffn, experts = self.tpu_shape if ON_TPU else self.cpu_shape
        self.lhs = (torch.randn(rows, hidden) * hidden**-0.5).to(DTYPE).to(self.device)
        self.rhs = (torch.randn(experts, hidden, ffn) * 0.5).to(DTYPE).to(self.device)
        routed = torch.randint(0, experts, (rows,))  # a router's choice: uneven groups
        self.group_sizes = torch.bincount(routed, minlength=experts).to(torch.int32).to(self.device)
        self.grad = (torch.randn(rows, ffn) * ffn**-0.5).to(DTYPE).to(self.device)

    def _backward(self, fn) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        lhs, rhs = self.lhs.detach().requires_grad_(), self.rhs.detach().requires_grad_()
        fn(lhs, rhs, self.group_sizes).backward(self.grad)
        return lhs.grad, rhs.grad

    def benchmark_forward(self) -> None:
        self.result = self.kernel.torch_ops.gmm(self.lhs, self.rhs, self.group_sizes)
        wait()

    def verify_forward(self) -> torch.Tensor:
        return native(self.lhs, self.rhs, self.group_sizes).float()

    def benchmark_forward_native(self) -> None:
        self.result = native(self.lhs, self.rhs, self.group_sizes)
        wait()

    def benchmark_backward(self) -> None:
        self.result = self._backward(self.kernel.torch_ops.gmm)
        wait()

    def verify_backward(self) -> torch.Tensor:
        return self.flat(*self._backward(native))

    def benchmark_backward_native(self) -> None:
        self.result = self._backward(native)
        wait()


class MixtralExperts(_GroupedMatmul, Workload):
    """Mixtral-8x7B: 8192 tokens x top-2, hidden 4096, FFN 14336, 8 experts."""

    tpu_shape = (16384, 4096, 14336, 8)


class Qwen3MoeExperts(_GroupedMatmul, Workload):
    """Qwen3-30B-A3B: 4096 tokens x top-8, hidden 2048, FFN 768, 128 experts."""

    tpu_shape = (32768, 2048, 768, 128)
