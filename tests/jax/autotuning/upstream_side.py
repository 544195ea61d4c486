"""Run in the upstream venv (tokamax 0.0.17): `python upstream_side.py OURS.json OUT.json`.

Upstream's side of the interchange checks, written to OUT.json:
- `reloaded`: the result this kernel made (OURS.json) read by upstream's `AutotuningResult.loads`
  and written again by its `dumps`;
- `made`: a result made by upstream's own code for the same call: its `get_bound_args` on the TPU
  lowering, a candidate of its search space other than its heuristic choice, and upstream's
  serializer. Upstream cannot time configs on a CPU host (its autotune fails every candidate
  here), so the timings are stated, not measured: timings decide nothing once a result holds one config;
- `made_config`: that config's fields;
- `tiles_outside` / `tiles_inside`: the tiles upstream's public call lowers to without and within
  `with AutotuningResult.loads(made):` (upstream 0.0.17 steers nothing there: its Op instances never
  compare equal).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.autotuning import calls  # noqa: E402

_TILES = re.compile(r"tile_m\\22:(\d+),\\22tile_k\\22:(\d+),\\22tile_n\\22:(\d+)")


def _emulation():  # noqa: ANN202 - our standalone chip helpers, loaded by path
    spec = importlib.util.spec_from_file_location("kernel_emulation", REPO / "torch-ext/tokamax/emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(ours: Path, out: Path) -> int:
    from tokamax._src import benchmarking
    from tokamax._src.autotuning import autotuner

    import tokamax

    emulation = _emulation()
    reloaded = tokamax.AutotuningResult.loads(ours.read_text()).dumps()
    with calls.for_tpu(tokamax.config, emulation):
        lowered = jax.jit(calls.public_call(tokamax)).trace(*calls.specs()).lower(lowering_platforms=("tpu",))
        (ba,) = tokamax.autotuning.get_bound_args(lowered)
        heuristic = ba.heuristics_config
        config = sorted((c for c in ba.autotuning_configs if c != heuristic), key=repr)[-1]
    data = autotuner.AutotuningData({config: benchmarking.BenchmarkData(
        compile_time_ms=1.0, lower_time_ms=1.0, evaluation_times_ms=(1.0, 1.0, 1.0), metadata={})})
    made = tokamax.AutotuningResult(calls.DEVICE_KIND, ((ba, data),)).dumps()
    outside = calls.lower(calls.public_call(tokamax), tokamax.config, emulation)
    with tokamax.AutotuningResult.loads(made):
        inside = calls.lower(calls.public_call(tokamax), tokamax.config, emulation)
    out.write_text(json.dumps({
        "jax": jax.__version__, "reloaded": reloaded, "made": made, "made_config": dataclasses.asdict(config),
        "tiles_outside": sorted(set(_TILES.findall(outside))), "tiles_inside": sorted(set(_TILES.findall(inside)))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
