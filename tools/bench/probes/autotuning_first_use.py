"""Probe (JAX tier): what the autotuning machinery costs a cold process, the search left out.

    python autotuning_first_use.py VARIANT_DIR ROUNDS
After loading the kernel and the Op layer (`ops.ragged_dot`): the first access to `ops.autotune`
(upstream's autotuning API, hlo_utils and the op families it lists), reading a one-entry result
file (`tuning.load`), and tracing the public call at a Mixtral-sized key on v6e inside the result
against outside it (alternating, ROUNDS each; the overlay lookup is the difference). Prints JSON.
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import kernels

tokamax = kernels.get_local_kernel(Path(sys.argv[1]))
ROUNDS = int(sys.argv[2])
specs = (jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16), jax.ShapeDtypeStruct((8, 4096, 14336), jnp.bfloat16),
         jax.ShapeDtypeStruct((8,), jnp.int32))
ops, emulation = tokamax.ops, tokamax.emulation
ops.ragged_dot, ops.config  # noqa: B018 - the Op layer, which a first public call imports anyway
before = set(sys.modules)
start = time.perf_counter()
ops.autotune, ops.AutotuningResult  # noqa: B018
import_ms = (time.perf_counter() - start) * 1e3
modules = len(set(sys.modules) - before)


def trace_ms() -> float:
    start = time.perf_counter()
    jax.jit(lambda *a: ops.ragged_dot(*a)).trace(*specs)
    return (time.perf_counter() - start) * 1e3


with ops.config.cross_compile(True), emulation.emulated_chip("v6e"), \
        jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
    (bound,) = ops.autotuning.get_bound_args(jax.jit(lambda *a: ops.ragged_dot(*a)).trace(*specs).lower(
        lowering_platforms=("tpu",)))
    root = f"{tokamax.__name__}._ported._src"
    data = sys.modules[f"{root}.autotuning.autotuner"].AutotuningData(
        {bound.op.config_cls(tile_m=256, tile_k=2048, tile_n=512): sys.modules[f"{root}.benchmarking"].BenchmarkData(
            1.0, 1.0, (1.0,), {})})
    path = Path(tempfile.mkdtemp()) / "result.json"
    path.write_text(ops.AutotuningResult("TPU v6 lite", ((bound, data),)).dumps())
    start = time.perf_counter()
    result = tokamax.tuning.load(path)
    load_ms = (time.perf_counter() - start) * 1e3
    inside, outside = [], []
    for _ in range(ROUNDS):
        outside.append(trace_ms())
        with result:
            inside.append(trace_ms())
print(json.dumps({"import_ms": import_ms, "modules": modules, "load_ms": load_ms, "bytes": path.stat().st_size,
                  "trace_inside_ms": statistics.median(inside), "trace_outside_ms": statistics.median(outside)}))
