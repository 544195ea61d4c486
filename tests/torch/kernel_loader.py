"""Run by the Torch tier's loading tests in a fresh interpreter: `python kernel_loader.py MODE ...`.

MODE consumer VARIANT DIR: load the consumer kernel through LOCAL_KERNELS (set by the test), run
its gmm on Torch tensors and report. MODE hub [--tpu-host] [--lockfile FILE]: load tokamax from
the offline Hub cache the test laid out (HF_HUB_OFFLINE=1, no LOCAL_KERNELS); --tpu-host makes
`torch.backends.tpu` exist, which is all `kernels` reads to detect a TPU host.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import torch


def consumer() -> dict:
    import kernels

    kernel = kernels.get_kernel("kernels-test/tokamax-consumer", version=1)
    g = torch.Generator().manual_seed(0)
    lhs, rhs = torch.randn(256, 128, generator=g), torch.randn(3, 128, 128, generator=g)
    sizes = torch.tensor([100, 0, 156], dtype=torch.int32)
    out = kernel.grouped_matmul(lhs, rhs, sizes)
    expected = torch.cat([lhs[:100] @ rhs[0], lhs[100:256] @ rhs[2]])
    return {"consumer": kernel.__name__, "tokamax": kernel.tokamax.__name__,
            "max_err": float((out - expected).abs().max())}


def hub(tpu_host: bool, lockfile: str | None) -> dict:
    if tpu_host:
        torch.backends.tpu = types.ModuleType("torch.backends.tpu")
    import kernels
    from kernels.backends import _backend

    system = {"system_backend": _backend().name, "torch_cuda": torch.version.cuda}
    try:
        if lockfile:
            kernel = kernels.load_kernel("kernels-community/tokamax", lockfile=Path(lockfile))
        else:
            kernel = kernels.get_kernel("kernels-community/tokamax", version=1)
    except Exception as e:  # reported for the test to assert on
        return {"loaded": False, "error": f"{type(e).__name__}: {e}", **system}
    return {**system, "loaded": True, "name": kernel.__name__, "file": kernel.__file__,
            "gmm": kernel.ragged_dot.gmm.__module__}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["consumer", "hub"])
    parser.add_argument("--tpu-host", action="store_true")
    parser.add_argument("--lockfile")
    args = parser.parse_args()
    report = consumer() if args.mode == "consumer" else hub(args.tpu_host, args.lockfile)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
