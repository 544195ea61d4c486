"""The causal-LM loss: `tokamax.torch_ops.linear_softmax_cross_entropy_loss` (no [tokens, vocab]
logits in memory) against what a Torch user runs, `lm_head` then `F.cross_entropy` on the
materialised logits in float32 (as transformers' loss does), forward and backward, at a Llama-3-8B
head (hidden 4096, vocabulary 128256) and 4096 tokens, sized for one v5e/v6e chip.

    kernels benchmark kernels-community/tokamax@v1
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import DTYPE, ON_TPU, Workload, jax_runs_lm_loss, wait  # noqa: E402

SKIPPED: dict[str, str] = {}
_why = jax_runs_lm_loss()
if _why is not None:  # the materialised-logits workloads still run: the file never fails to load
    SKIPPED["LlamaHeadLoss.forward"] = SKIPPED["LlamaHeadLoss.backward"] = _why


def materialised(x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The alternative: logits = x @ w ([tokens, vocab]), then cross-entropy in float32."""
    return F.cross_entropy((x @ w).float(), labels.long())


class LlamaHeadLoss(Workload):
    """Llama-3-8B's head: hidden 4096, vocabulary 128256, 4096 tokens."""

    tpu_shape = (4096, 4096, 128256)  # tokens, hidden, vocabulary
    cpu_shape = (128, 128, 512)

    def setup(self) -> None:
        tokens, hidden, vocab = self.tpu_shape if ON_TPU else self.cpu_shape
        self.x = torch.randn(tokens, hidden).to(DTYPE).to(self.device)
        self.w = (torch.randn(hidden, vocab) * hidden**-0.5).to(DTYPE).to(self.device)
        self.labels = torch.randint(0, vocab, (tokens,), dtype=torch.int32).to(self.device)

    def tokamax(self, x: torch.Tensor, labels: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss, _ = self.kernel.torch_ops.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean")
        return loss

    def _backward(self, fn) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
        x, w = self.x.detach().requires_grad_(), self.w.detach().requires_grad_()
        loss = fn(x, self.labels, w)
        loss.backward()
        return loss, x.grad * x.shape[0], w.grad * x.shape[0]  # per-token scale: mean's 1/tokens undone

    if _why is None:
        def benchmark_forward(self) -> None:
            self.result = self.tokamax(self.x, self.labels, self.w)
            wait()

        def verify_forward(self) -> torch.Tensor:
            return materialised(self.x, self.labels, self.w)

        def benchmark_backward(self) -> None:
            self.result = self._backward(self.tokamax)
            wait()

        def verify_backward(self) -> torch.Tensor:
            return self.flat(*self._backward(materialised))

    def benchmark_forward_materialised(self) -> None:
        self.result = materialised(self.x, self.labels, self.w)
        wait()

    def benchmark_backward_materialised(self) -> None:
        self.result = self._backward(materialised)
        wait()

