"""The causal-LM loss: `tokamax.torch_ops.linear_softmax_cross_entropy_loss` (no [tokens, vocab]
logits in memory) against what a Torch user runs, `lm_head` then `F.cross_entropy` on the
materialised logits in float32 (as transformers' loss does), forward and backward, at a Llama-3-8B
head (hidden 4096, vocabulary 128256) and 4096 tokens, sized for one v5e/v6e chip; and TRL's fused
LM head (`lm_head_statistics`, our kernels) against TRL 1.16's own function (`TrlHeadLogProbs`), and
DistillationTrainer's divergence (`distillation_divergence`) against TRL's own (`TrlDistillDivergence`).

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



def _trl_function():  # noqa: ANN202
    """TRL's own fused LM head (`trl.kernels.ChunkedLogProbFunction`), or None without TRL."""
    try:
        from trl.kernels import ChunkedLogProbFunction
    except ImportError:
        return None
    return ChunkedLogProbFunction


def _log_probs_materialised(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Without TRL: the logits [tokens, vocab] in float32, log-softmax, the target's."""
    logp = torch.log_softmax((hidden @ weight.t()).float(), -1)
    return logp.gather(1, targets[:, None].long())[:, 0]


class TrlHeadLogProbs(Workload):
    """TRL's fused LM head as its SFT trainer asks for it (log-probabilities, entropy, top-1; the loss the mean
    negative log-probability): this kernel's statistics against TRL 1.16's own function (its torch tiles on a
    device without Triton, as a TPU), at hidden 4096, Qwen's vocabulary of 151,936 and 16,384 tokens."""

    tpu_shape = (16384, 4096, 151936)  # tokens, hidden, vocabulary
    cpu_shape = (128, 128, 384)

    def setup(self) -> None:
        tokens, hidden, vocab = self.tpu_shape if ON_TPU else self.cpu_shape
        self.hidden = torch.randn(tokens, hidden).to(DTYPE).to(self.device)
        self.weight = (torch.randn(vocab, hidden) * hidden**-0.5).to(DTYPE).to(self.device)
        self.targets = torch.randint(0, vocab, (tokens,)).to(self.device)

    def _ours(self, hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
        stats = self.kernel.torch_ops.lm_head_statistics(hidden, weight, None, self.targets)
        return stats.log_probs, stats.entropy, stats.top1

    def _trl(self, hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
        fn = _trl_function()
        if fn is None:
            return (_log_probs_materialised(hidden, weight, self.targets),)
        log_probs, entropy, _, _, top1 = fn.apply(hidden, weight, None, self.targets, 1.0, 32768, None, 1.0,
                                                  ("log_probs", "entropy", "is_top1"))
        return log_probs, entropy, top1

    def _step(self, fn) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
        hidden, weight = self.hidden.detach().requires_grad_(), self.weight.detach().requires_grad_()
        log_probs = fn(hidden, weight)[0]
        (-log_probs.mean()).backward()
        return log_probs, hidden.grad * hidden.shape[0], weight.grad * hidden.shape[0]

    def benchmark_forward(self) -> None:
        self.result = self._ours(self.hidden, self.weight)[0]
        wait()

    def verify_forward(self) -> torch.Tensor:
        return self._trl(self.hidden, self.weight)[0]

    def benchmark_backward(self) -> None:
        self.result = self._step(self._ours)
        wait()

    def verify_backward(self) -> torch.Tensor:
        return self.flat(*self._step(self._trl))

    def benchmark_forward_trl(self) -> None:
        self.result = self._trl(self.hidden, self.weight)[0]
        wait()

    def benchmark_backward_trl(self) -> None:
        self.result = self._step(self._trl)
        wait()


def _trl_divergence():  # noqa: ANN202
    """TRL's own distillation divergence (`ChunkedDivergenceFunction`), or None without TRL."""
    try:
        from trl.kernels.chunked_divergence import ChunkedDivergenceFunction
    except ImportError:
        return None
    return ChunkedDivergenceFunction


def _jsd_materialised(hs, ws, ht, wt, beta: float) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Without TRL: both models' logits [tokens, vocab] in float32, the generalized JSD and the entropy."""
    lps, lpt = torch.log_softmax((hs @ ws.t()).float(), -1), torch.log_softmax((ht @ wt.t()).float(), -1)
    lm = torch.logaddexp(lps + torch.log1p(torch.tensor(-beta)), lpt + torch.log(torch.tensor(beta)))
    div = beta * (lpt.exp() * (lpt - lm)).sum(-1) + (1 - beta) * (lps.exp() * (lps - lm)).sum(-1)
    return div, -(lps.exp() * lps).sum(-1)


class TrlDistillDivergence(Workload):
    """DistillationTrainer's divergence (the generalized JSD at beta 0.5, the student's entropy; the loss the
    mean divergence, its gradients into the student's hidden states and head): this kernel's
    `distillation_divergence` against TRL 1.16's own `ChunkedDivergenceFunction` (its torch tiles on a device
    without Triton, as a TPU), at student hidden 2048, teacher hidden 4096, Qwen's vocabulary of 151,936 and
    16,384 tokens."""

    tpu_shape = (16384, 2048, 4096, 151936)  # tokens, student hidden, teacher hidden, vocabulary
    cpu_shape = (96, 64, 128, 384)
    beta = 0.5

    def setup(self) -> None:
        tokens, hs, ht, vocab = self.tpu_shape if ON_TPU else self.cpu_shape
        self.hs = torch.randn(tokens, hs).to(DTYPE).to(self.device)
        self.ws = (torch.randn(vocab, hs) * hs**-0.5).to(DTYPE).to(self.device)
        self.ht = torch.randn(tokens, ht).to(DTYPE).to(self.device)
        self.wt = (2 * torch.randn(vocab, ht) * ht**-0.5).to(DTYPE).to(self.device)

    def _ours(self, hs: torch.Tensor, ws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.kernel.torch_ops.distillation_divergence(hs, ws, None, self.ht, self.wt, None, beta=self.beta)

    def _trl(self, hs: torch.Tensor, ws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fn = _trl_divergence()
        if fn is None:
            return _jsd_materialised(hs, ws, self.ht, self.wt, self.beta)
        return fn.apply(hs, ws, None, self.ht, self.wt, None, self.beta, 1.0, 1.0, None, 1.0, None)

    def _step(self, fn) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
        hs, ws = self.hs.detach().requires_grad_(), self.ws.detach().requires_grad_()
        div = fn(hs, ws)[0]
        div.mean().backward()
        return div, hs.grad * hs.shape[0], ws.grad * hs.shape[0]

    def benchmark_forward(self) -> None:
        self.result = self._ours(self.hs, self.ws)[0]
        wait()

    def verify_forward(self) -> torch.Tensor:
        return self._trl(self.hs, self.ws)[0]

    def benchmark_backward(self) -> None:
        self.result = self._step(self._ours)
        wait()

    def verify_backward(self) -> torch.Tensor:
        return self.flat(*self._step(self._trl))

    def benchmark_forward_trl(self) -> None:
        self.result = self._trl(self.hs, self.ws)[0]
        wait()

    def benchmark_backward_trl(self) -> None:
        self.result = self._step(self._trl)
        wait()
