"""Where a Torch call's wall time goes on the host: each bridge shape's Torch ways (`torch_ways.ways`) called with
the call and its wait timed apart, then called again under cProfile.

    python3 -m tools.torch_chip host --out DIR [--shapes causal]   # on the chip: DIR/host.json

A waited call is launch (the Python call returning: argument checks, autograd, torch-tpu's `jax_op` binding its
arguments and enqueuing the executable) plus what the chip still has to run at the wait. Issued back to back, the
launches overlap the chip's work; waited for, they add to it. The splash forward at 8k runs 1.76 ms past its device
time from Torch against 0.74 ms from JAX (cea233d's traces): this says how much of that is the host's launch, and,
from the profile, in whose code (the package's, torch's dispatch, torch-tpu's).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

from .records import record
from .timing import synchronize

TOP = 30
"""Functions kept per profile, by their own time and by their cumulative time."""


def launch_and_wait(call: Any, runs: int) -> dict[str, float]:
    """Median seconds from the call to its return (launch) and from there to the wait's end, over `runs` calls."""
    launch, wait = [], []
    for _ in range(runs):
        synchronize()
        start = time.perf_counter()
        call()
        returned = time.perf_counter()
        synchronize()
        launch.append(returned - start)
        wait.append(time.perf_counter() - returned)
    return {"launch_s": statistics.median(launch), "wait_s": statistics.median(wait),
            "launch_min_s": min(launch), "total_s": statistics.median(a + b for a, b in zip(launch, wait, strict=True))}


def profile_of(call: Any, runs: int, package: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """cProfile's view of `runs` waited calls: the functions with the most own time and the most cumulative time,
    per call, and (where `package`, the loaded package's folder, is given) the package's own functions by their
    cumulative time, wherever they rank among the rest."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        call()
        synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows, ours = [], []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        row = {"function": f"{_short(path, package)}:{line}:{name}", "calls_per_call": calls / runs,
               "own_s": own / runs, "cumulative_s": cumulative / runs}
        rows.append(row)
        if package is not None and path.startswith(package):
            ours.append(row)
    by = {"own": sorted(rows, key=lambda r: -r["own_s"])[:TOP],
          "cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:TOP]}
    if package is not None:
        by["package"] = sorted(ours, key=lambda r: -r["cumulative_s"])[:TOP]
    return by


def _short(path: str, package: str | None = None) -> str:
    """A path from its package on: the loaded package's as tokamax/..., others with site-packages and the like
    dropped."""
    if package is not None and path.startswith(package):
        return "tokamax/" + path[len(package):].lstrip("/")
    for marker in ("site-packages/", "torch-tpu/", "wheels-site/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def host_side(tk: Any, out: Any, runs: int, device: str, shapes: tuple) -> None:
    """Each shape's package ways (not torch-tpu's own, not torch.compile's): launch and wait apart, and profiled."""
    import torch

    from . import bridge, torch_ways

    for shape in shapes:
        tensors = {k: torch.from_numpy(v).to(device) for k, v in bridge.inputs(shape).items()}
        tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
        for way in torch_ways.ways(tk, shape, tensors):
            if not way.impl.startswith("tokamax (torch") or "compile" in way.impl:
                continue

            def once(way: Any = way) -> Any:
                for t in way.leaves:
                    t.grad = None
                return way.call()
            try:
                for _ in range(3):  # the first compiles and exports
                    once()
                synchronize()
                split = launch_and_wait(once, runs)
                profile = profile_of(once, runs, str(Path(tk.__file__).resolve().parent))
            except Exception as e:  # noqa: BLE001  (recorded)
                out.add(record(shape.op, shape.case, way.impl, way.pass_, None, error=f"{type(e).__name__}: {e}"[:600]))
                continue
            out.add(record(shape.op, shape.case, way.impl, way.pass_, split["total_s"], runs=runs, **split,
                           profile=profile))
            print(f"host | {shape.case} | {way.impl} | {way.pass_}: launch {split['launch_s'] * 1e3:.2f} ms, "
                  f"wait {split['wait_s'] * 1e3:.2f} ms; most own time: "
                  + ", ".join(f"{r['function']} {r['own_s'] * 1e3:.2f}" for r in profile["own"][:4])
                  + "; the package's (cumulative): "
                  + ", ".join(f"{r['function']} {r['cumulative_s'] * 1e3:.2f}" for r in profile["package"][:3]),
                  flush=True)
        del tensors
