"""Shared by the `kernels benchmark` files here: TPU detection, waiting for results, sizes.

kernels 0.17.2's runner times `benchmark_*` with `time.perf_counter()` around each call and
synchronises CUDA, XPU and MPS only, so on a TPU it would time the dispatch alone. Each workload
here therefore ends with `wait()`, which blocks until the device has finished (torch-tpu's
`torch.accelerator.synchronize()`, or `torch.tpu.synchronize()` before torch 2.11): a figure is
the wall time of one call through to its result on the device, for the kernel and for the
alternative alike, so their ratio compares device work (plus the same host dispatch on each side).

Off TPU (CPU tensors, Pallas TPU interpret mode) the same workloads run at small sizes to check
that every `verify_*` holds; their times mean nothing there.
"""

from __future__ import annotations

from typing import Any

import torch
from kernels.benchmark import Benchmark

ON_TPU = hasattr(torch.backends, "tpu")  # what kernels itself reads to pick the tpu backend
# bf16 on a TPU, as models run; float32 on CPU hosts, where the runner's check (allclose, atol 1e-2)
# then compares the kernel with the alternative far below that tolerance.
DTYPE = torch.bfloat16 if ON_TPU else torch.float32


def wait() -> None:
    """Blocks until the device has run everything queued (a no-op for CPU tensors)."""
    if ON_TPU:
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and accelerator.is_available():
            accelerator.synchronize()
        else:
            torch.tpu.synchronize()


def jax_runs_lm_loss() -> str | None:
    """None if the installed jax runs the linear softmax cross-entropy kernel, else why not."""
    import jax

    version = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())
    return None if version >= (0, 11, 1) else f"the kernel needs jax >= 0.11.1; this host has jax {jax.__version__}"


class Workload(Benchmark):
    """A Benchmark on a TPU (or CPU tensors, off TPU) whose `out` (what the runner compares with
    `verify_*`'s reference) is the last result in float32, converted only when read, so timing
    never includes the conversion."""

    seed = 0
    _device = "cpu"

    def __init__(self) -> None:
        self.result: Any = None
        super().__init__()

    @property
    def device(self) -> str:
        return self._device

    @device.setter
    def device(self, name: str) -> None:
        # kernels' runner hands over the device of the backend it detects. Without torch-tpu's backend
        # (a host without TPU chips) it names what the torch build was made for: "cuda" for the
        # CUDA-linked build pip gives Python >= 3.12, also where no GPU exists. This kernel's ops run
        # on TPU tensors, or on CPU tensors in interpret mode: any other device means CPU here.
        self._device = name if name in ("tpu", "cpu") else "cpu"

    @property
    def out(self) -> Any:
        if isinstance(self.result, (tuple, list)):
            return torch.cat([r.detach().float().flatten() for r in self.result])
        return None if self.result is None else self.result.detach().float()

    @out.setter
    def out(self, value: Any) -> None:
        self.result = value

    @staticmethod
    def flat(*tensors: torch.Tensor) -> torch.Tensor:
        """Several results as one float32 vector, for a reference to compare with `out`."""
        return torch.cat([t.detach().float().flatten() for t in tensors])
