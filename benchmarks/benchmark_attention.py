"""Attention: `tokamax.torch_ops.splash_attention` against what a Torch TPU user has,
`F.scaled_dot_product_attention` and torch-tpu's `torch.tpu.ops.splash_sdpa` (TPU only), forward
and backward: causal multi-head, causal grouped-query, a sliding window (SDPA with its dense
mask, splash_sdpa with its window), and one decode step against a static KV cache filled to a
run-time level (SDPA with a padding mask; splash_sdpa has no offset, so it is not compared there).
Sized for one v5e/v6e chip; tiny on CPU hosts.

    kernels benchmark kernels-community/tokamax@v1
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import DTYPE, ON_TPU, Workload, wait  # noqa: E402

SKIPPED: dict[str, str] = {}
if not ON_TPU:
    SKIPPED["*.*_splash_sdpa"] = "torch.tpu.ops.splash_sdpa runs on TPU tensors only"


def window_mask(q_len: int, kv_len: int, left: int, device: str) -> torch.Tensor:
    """SDPA's form of a causal sliding window: key j visible to query i when i - left <= j <= i."""
    i = torch.arange(q_len, device=device)[:, None]
    j = torch.arange(kv_len, device=device)[None, :]
    return (j <= i) & (j >= i - left)


class _Attention:  # the workloads; a Benchmark only with a shape (kernels runs every subclass)
    # (batch, heads, kv_heads, length, head_dim, window or None) on a TPU; tiny on CPU
    tpu_shape: tuple[int, int, int, int, int, int | None]
    cpu_shape: tuple[int, int, int, int, int, int | None]

    def setup(self) -> None:
        batch, heads, kv_heads, length, dim, self.window = self.tpu_shape if ON_TPU else self.cpu_shape
        self.q, self.k, self.v = (torch.randn(batch, h, length, dim).to(DTYPE).to(self.device)
                                  for h in (heads, kv_heads, kv_heads))
        self.grad = (torch.randn(batch, heads, length, dim) * 0.3).to(DTYPE).to(self.device)
        self.scale = dim**-0.5
        self.mask = None if self.window is None else window_mask(length, length, self.window, self.device)

    def tokamax(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        window = None if self.window is None else (self.window, 0)
        return self.kernel.torch_ops.splash_attention(q * self.scale, k, v, causal=True, window=window)

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        gqa = q.shape[1] != k.shape[1]
        if self.mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, enable_gqa=gqa)

    def splash_sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.tpu.ops.splash_sdpa(q, k, v, is_causal=True, local_window_size=self.window,
                                         enable_gqa=q.shape[1] != k.shape[1])

    def _backward(self, fn) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
        q, k, v = (t.detach().requires_grad_() for t in (self.q, self.k, self.v))
        fn(q, k, v).backward(self.grad)
        return q.grad, k.grad, v.grad

    def benchmark_forward(self) -> None:
        self.result = self.tokamax(self.q, self.k, self.v)
        wait()

    def verify_forward(self) -> torch.Tensor:
        return self.sdpa(self.q, self.k, self.v).float()

    def benchmark_forward_sdpa(self) -> None:
        self.result = self.sdpa(self.q, self.k, self.v)
        wait()

    def benchmark_backward(self) -> None:
        self.result = self._backward(self.tokamax)
        wait()

    def verify_backward(self) -> torch.Tensor:
        return self.flat(*self._backward(self.sdpa))

    def benchmark_backward_sdpa(self) -> None:
        self.result = self._backward(self.sdpa)
        wait()

    if ON_TPU:
        def benchmark_forward_splash_sdpa(self) -> None:
            self.result = self.splash_sdpa(self.q, self.k, self.v)
            wait()

        def benchmark_backward_splash_sdpa(self) -> None:
            self.result = self._backward(self.splash_sdpa)
            wait()


class CausalMHA(_Attention, Workload):
    """Llama-2-7B-like layer: batch 2, 32 heads, 4096 tokens, head_dim 128."""

    tpu_shape = (2, 32, 32, 4096, 128, None)
    cpu_shape = (1, 2, 2, 128, 128, None)


class CausalGQA(_Attention, Workload):
    """Llama-3-8B / Mixtral-like layer: batch 2, 32 query heads over 8 KV heads, 4096 tokens."""

    tpu_shape = (2, 32, 8, 4096, 128, None)
    cpu_shape = (1, 4, 2, 128, 128, None)


class SlidingWindowGQA(_Attention, Workload):
    """A sliding-window layer (Mistral/Gemma-style): 8192 tokens, window 1024, 32 over 8 heads."""

    tpu_shape = (1, 32, 8, 8192, 128, 1024)
    cpu_shape = (1, 4, 2, 256, 128, 64)


class DecodeStaticCache(Workload):
    """One generate() step: batch 8, one new token, 32 query heads over 8 KV heads, a static cache
    of 8192 slots filled to 5000 (the level a tensor, as transformers' static cache holds it)."""

    tpu_shape = (8, 32, 8, 8192, 128, 5000)
    cpu_shape = (2, 4, 2, 256, 128, 150)

    def setup(self) -> None:
        batch, heads, kv_heads, slots, dim, fill = self.tpu_shape if ON_TPU else self.cpu_shape
        self.q = torch.randn(batch, heads, 1, dim).to(DTYPE).to(self.device)
        self.k, self.v = (torch.randn(batch, kv_heads, slots, dim).to(DTYPE).to(self.device)
                          for _ in range(2))
        self.fill = torch.tensor([fill], dtype=torch.int32, device=self.device)  # the new token's position
        self.keys_seen = (torch.arange(slots, device=self.device) <= fill)[None, None, None, :]
        self.scale = dim**-0.5

    def benchmark_step(self) -> None:
        with torch.no_grad():
            self.result = self.kernel.torch_ops.splash_attention(self.q * self.scale, self.k, self.v,
                                                                 causal=True, q_offset=self.fill)
        wait()

    def verify_step(self) -> torch.Tensor:
        return F.scaled_dot_product_attention(self.q, self.k, self.v, attn_mask=self.keys_seen,
                                              enable_gqa=True).float()

    def benchmark_step_sdpa(self) -> None:
        self.result = F.scaled_dot_product_attention(self.q, self.k, self.v, attn_mask=self.keys_seen,
                                                     enable_gqa=True)
        wait()
