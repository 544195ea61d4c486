"""Probe (JAX tier): what upstream's config choice costs at trace time.

    python selection_cost.py VARIANT_DIR ROUNDS
Traces (jit, no compile) the public `ops.ragged_dot` at a Mixtral-sized table key on v6e, and
the raw `ragged_dot.gmm` with the same tiles, alternating round by round (the kernel's own inner
jit caches its trace on both sides, so the difference is the Op layer: bind, key, table lookup);
also importing the Op layer, and the first public call, which reads the chip's table. Prints
medians in milliseconds as JSON.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import kernels

tokamax = kernels.get_local_kernel(Path(sys.argv[1]))
ROUNDS = int(sys.argv[2])
specs = (jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16), jax.ShapeDtypeStruct((8, 4096, 14336), jnp.bfloat16),
         jax.ShapeDtypeStruct((8,), jnp.int32))


def public(lhs, rhs, sizes):  # noqa: ANN001, ANN201
    return tokamax.ops.ragged_dot(lhs, rhs, sizes, implementation="mosaic")


def raw(lhs, rhs, sizes):  # noqa: ANN001, ANN201
    return tokamax.ragged_dot.gmm(lhs, rhs, sizes, precision=jax.lax.Precision.DEFAULT, out_dtype=jnp.bfloat16,
                                  tiling=(512, 4096, 1024))


def trace_ms(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    jax.jit(lambda *a: fn(*a)).trace(*specs)  # a new function each time: JAX caches traces per function
    return (time.perf_counter() - start) * 1e3


emulation = tokamax.emulation
start = time.perf_counter()
tokamax.ops.ragged_dot, tokamax.ops.config  # noqa: B018 - imports upstream's Op layer
import_ms = (time.perf_counter() - start) * 1e3
with tokamax.ops.config.cross_compile(True), emulation.emulated_chip("v6e"), \
        jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
    first = trace_ms(public)
    samples = {"public": [], "raw": []}
    for _ in range(ROUNDS):
        samples["public"].append(trace_ms(public))
        samples["raw"].append(trace_ms(raw))
out = {name: statistics.median(v) for name, v in samples.items()}
out["first_public"] = first  # reads the chip's table, traces the kernel the first time
out["import_ops"] = import_ms
out["rounds"] = ROUNDS
print(json.dumps(out))
