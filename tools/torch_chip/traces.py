"""Where the bridge's time goes: the chip's own trace of a few calls of each bridge shape, from JAX and from Torch,
so the two sides' device time per call (the kernels each runs, and any copy or cast around them) can be set side
by side with their wall time.

    python3 -m tools.torch_chip jax-profile --out DIR   # on the chip, JAX holding it: DIR/profile/jax/<shape>/...
    python3 -m tools.torch_chip profile --out DIR       # on the chip, torch-tpu holding it: DIR/profile/torch/...
    python -m tools.torch_chip.traces DIR               # here, with xprof installed: the summary of both

The traces are XSpace protobufs (`*.xplane.pb`), written by JAX's profiler and by torch-tpu's (its
`torch_tpu._internal.profiler`, the one torch-tpu 0.2.0 has). Reading them needs xprof's reader
(`xprof.profile_data`), which no tier installs: the summary is an analysis step, not a test's.
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the reading half runs where no JAX is installed (xprof's venv)
    from .bridge import Shape

CALLS = 3
"""Calls traced per way, after one untraced call (its compile)."""

PROFILED = ("OLMoE", "causal", "Mixtral")
"""The shapes traced (a case name's start): where the bridge costs most, and one where it costs least."""


def _slug(shape: Shape, way: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{shape.case.split(':')[0]}-{way}").strip("-").lower()


def _profiled(shapes: tuple[Shape, ...]) -> Iterator[Shape]:
    return (s for s in shapes if s.case.startswith(PROFILED) or s.case.startswith("tiny"))


def jax_traces(tk: Any, out: Path, shapes: tuple[Shape, ...]) -> list[str]:
    """Traces each profiled shape's JAX passes (the public op under `jax.jit`), `CALLS` calls each waited for."""
    import jax
    import jax.numpy as jnp

    from .bridge import _jax_passes, inputs

    written = []
    for shape in _profiled(shapes):
        arrays = tuple(jnp.asarray(v).astype(jnp.bfloat16) if v.dtype.kind == "f" else jnp.asarray(v)
                       for v in inputs(shape).values())
        for pass_, fn, _ in _jax_passes(tk, shape):
            compiled = jax.jit(fn)
            jax.block_until_ready(compiled(*arrays))
            where = out / "jax" / _slug(shape, pass_)
            with jax.profiler.trace(str(where)):
                for _ in range(CALLS):
                    jax.block_until_ready(compiled(*arrays))
            written.append(str(where))
            print(f"profile | jax | {shape.case} | {pass_}: {where}", flush=True)
        del arrays
    return written


def torch_traces(tk: Any, out: Path, device: str, shapes: tuple[Shape, ...]) -> list[str]:
    """Traces each profiled shape's Torch ways (the public op, the custom op alone, their fused-eager runs) with
    torch-tpu's profiler, `CALLS` calls each waited for; a way torch-tpu cannot trace is reported, not hidden."""
    import torch

    from . import torch_ways
    from .bridge import inputs
    from .timing import synchronize

    written = []
    for shape in _profiled(shapes):
        tensors = {k: torch.from_numpy(v).to(device) for k, v in inputs(shape).items()}
        tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
        for way in torch_ways.ways(tk, shape, tensors):
            if not way.impl.startswith("tokamax (torch") or "compile" in way.impl:
                continue
            where = out / "torch" / _slug(shape, f"{way.impl}-{way.pass_}")
            try:
                _once(way)
                synchronize()
                with torch_profiler(where):
                    for _ in range(CALLS):
                        _once(way)
                        synchronize()
                written.append(str(where))
                print(f"profile | torch | {shape.case} | {way.impl} | {way.pass_}: {where}", flush=True)
            except Exception as e:  # noqa: BLE001  (reported: the trace is a diagnosis, the bridge run the record)
                print(f"profile | torch | {shape.case} | {way.impl} | {way.pass_}: {type(e).__name__}: {e}"[:400],
                      flush=True)
        del tensors
    return written


def _once(way: Any) -> Any:
    for t in way.leaves:
        t.grad = None
    return way.call()


def torch_profiler(where: Path) -> Any:
    from torch_tpu._internal import profiler  # torch-tpu 0.2.0's trace (its public torch.tpu.profiler: config only)

    return profiler.profile(activities=[profiler.ProfilerActivity.TPU, profiler.ProfilerActivity.CPU],
                            on_trace_ready=profiler.xprof_trace_handler(str(where)))


# ---- here: reading the traces ----

def device_ops(path: Path) -> dict[str, dict[str, float]]:
    """Per device plane line ("XLA Modules", "XLA Ops", ...): total microseconds per event name in one trace."""
    from xprof.profile_data import ProfileData  # xprof: see the module's docstring

    totals: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    data = ProfileData.from_file(str(path))
    for plane in data.planes:
        if not plane.name.startswith("/device:TPU:0"):
            continue
        for line in plane.lines:
            for event in line.events:
                totals[line.name][event.name] += event.duration_ns / 1e3
    return {k: dict(v) for k, v in totals.items()}


def summary(root: Path, top: int = 8) -> dict[str, Any]:
    """Each trace under `root` ("jax/<shape-pass>", "torch/<shape-way-pass>"): per device line ("XLA Modules": the
    executables, "XLA Ops": their ops), the microseconds per call in all, and the costliest `top` names."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*.xplane.pb")):
        lines = {}
        for line, events in device_ops(path).items():
            if line.startswith("_") or not events:
                continue
            costly = sorted(events.items(), key=lambda kv: -kv[1])[:top]
            lines[line] = {"us_per_call": round(sum(events.values()) / CALLS, 1),
                           "top": [[name[:160], round(us / CALLS, 1)] for name, us in costly]}
        out["/".join(path.relative_to(root).parts[:2])] = lines
    return out


def main(argv: list[str]) -> int:
    """`python -m tools.torch_chip.traces DIR [OUT.json HEAD.json]`: the summary printed; with OUT, written as a
    Torch-mode results file whose header (chip, stack, commit) is HEAD's, the bridge run of the same session."""
    import json

    data = summary(Path(argv[0]))
    for name, lines in data.items():
        print(f"== {name}")
        for line, d in lines.items():
            print(f"  {line}: {d['us_per_call']:9.1f} us per call")
            for ev, us in d["top"]:
                print(f"      {us:9.1f} us  {ev[:110]}")
    if len(argv) > 2:
        head = {k: v for k, v in json.loads(Path(argv[2]).read_text()).items() if k not in ("records", "jax_side")}
        records = [{"op": "trace", "case": name.split("/", 1)[1], "impl": name.split("/", 1)[0], "pass": "trace",
                    "median_s": None, "status": "traced", "calls": CALLS, "device": lines}
                   for name, lines in data.items()]
        Path(argv[1]).write_text(json.dumps(head | {"what": "traces", "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
