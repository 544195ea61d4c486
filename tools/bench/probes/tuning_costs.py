"""Probe (Torch tier): what `tokamax.tuning.tune` adds around the step it records, and what a result
file costs at an op's first call.

    python tuning_costs.py VARIANT_DIR
- Recording: the time per op call that recording adds (gmm on meta tensors, its fake kernel: no kernel
  runs, so the op's own cost is the dispatch; 2000 calls, 7 rounds alternated, medians), and the one
  trace per distinct signature that binding its Ops costs.
- A result file at the first call: reading it whole (`tuning.load`, a file `tune` wrote for a small
  ragged dot in interpret mode), and entering it around a traced call (`tuning.applied`, what every
  export under a result does once). Prints JSON.
"""

import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _per_call_us(fn, calls: int) -> float:  # noqa: ANN001
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
    import kernels
    import torch

    tokamax = kernels.get_kernel("kernels-community/tokamax", version=1)
    ops = tokamax.torch_ops
    recording = importlib.import_module(f"{tokamax.__name__}.tuning.recorded").recording
    x, w = torch.zeros(256, 128, device="meta"), torch.zeros(4, 128, 128, device="meta")
    sizes = torch.zeros(4, dtype=torch.int32, device="meta")
    call = lambda: ops.gmm(x, w, sizes)  # noqa: E731
    plain, recorded = [], []
    for _ in range(7):
        plain.append(_per_call_us(call, 2000))
        with recording():
            recorded.append(_per_call_us(call, 2000))
    out = {"call_us": statistics.median(plain), "recorded_call_us": statistics.median(recorded)}
    out["recording_adds_us"] = out["recorded_call_us"] - out["call_us"]

    real = (torch.randn(256, 128), torch.randn(4, 128, 128), torch.tensor([64, 64, 64, 64], dtype=torch.int32))
    steps = tokamax.tuning.record(lambda: ops.gmm(*real))
    tune = importlib.import_module(f"{tokamax.__name__}.tuning.tune")
    start = time.perf_counter()
    bound = tune.bound_arguments(steps.calls[0], "v6e")
    out["bind_ms"] = (time.perf_counter() - start) * 1e3
    path = Path(tempfile.mkdtemp()) / "gmm-v6e.json"
    tokamax.tuning.tune_recording(steps, out=path, chip="v6e", max_configs=2, progress_bar=False)
    loads, enters = [], []
    for _ in range(9):
        start = time.perf_counter()
        active = importlib.import_module(f"{tokamax.__name__}.tuning.active")
        active._REGISTRY.clear()
        tokamax.tuning.load(path)
        loads.append((time.perf_counter() - start) * 1e3)
        with tokamax.tuning.use(path) as applied:
            start = time.perf_counter()
            with tokamax.emulation.emulated_chip("v6e"), tokamax.tuning.applied(applied.token, "gmm"):
                pass
            enters.append((time.perf_counter() - start) * 1e3)
    out.update(bound=len(bound), file_bytes=path.stat().st_size, load_ms=statistics.median(loads),
               applied_ms=statistics.median(enters))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
