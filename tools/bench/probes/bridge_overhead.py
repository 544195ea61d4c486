"""Probe (Torch tier): per-call cost of a Torch op made by the bridge against the same jitted JAX call.

    python bridge_overhead.py VARIANT_DIR CALLS
Registers one cheap op (x * 2 + 1) through tokamax.torch_ops' own machinery (jax_op, the CPU
kernel with DLPack and the interpret-mode context), times it on CPU tensors of a small and a
large size against the jitted JAX function on JAX arrays, and prints medians as JSON.
"""

import json
import os
import statistics
import sys
import time

import jax
import torch

os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={sys.argv[1]}"
import kernels  # noqa: E402

ops = kernels.get_kernel("kernels-community/tokamax", version=1).torch_ops
CALLS = int(sys.argv[2])


def scale(x: jax.Array) -> jax.Array:
    return x * 2 + 1


op = ops.register("bench_scale", scale)  # the same path every Torch op takes
jitted = jax.jit(scale)


def paired_medians_us(first, second) -> tuple[float, float]:  # noqa: ANN001
    """Median microseconds per call of two callables, timed in alternation so drift hits both."""
    for _ in range(20):
        first(), second()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(CALLS):
        for fn, out in ((first, samples[0]), (second, samples[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(samples[0]) * 1e6, statistics.median(samples[1]) * 1e6


report = {}
for name, shape in (("small", (256, 128)), ("large", (4096, 4096))):
    tensor = torch.randn(*shape)
    array = ops.to_jax(tensor)
    out = op(tensor)
    assert torch.equal(out, tensor * 2 + 1)
    torch_us, jax_us = paired_medians_us(lambda t=tensor: op(t), lambda a=array: jitted(a).block_until_ready())
    report[name] = {"shape": list(shape), "mib": tensor.numel() * 4 / 2**20, "torch_op_us": torch_us,
                    "jax_jit_us": jax_us, "overhead_us": torch_us - jax_us}
print(json.dumps(report))
