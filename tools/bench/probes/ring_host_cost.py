"""Probe (JAX tier): what it costs to make a causal ring for 8 chips, ours against upstream's path, and
how busy the busiest chip is at each ring step.

    python ring_host_cost.py VARIANT_DIR
- Ours (`tokamax.ring`, the Torch ring op's JAX functions): host time and peak traced-Python memory
  (tracemalloc) to lower the forward and the backward for 8 v6e chips (an abstract mesh), 8 query and 2
  KV heads of 128, bf16, batch 1, at 32768, 131072 and 1048576 tokens, plain and load-balanced; the
  modules' bytes and Mosaic kernel calls.
- Upstream's ring (`make_ring_attention`, a dense causal `NumpyMask`, what the op ran before): the same
  for 32768 tokens with upstream's 128-token blocks; at 131072 and 1048576 its dense [seq, seq] mask alone
  would be 16 GiB and 1 TiB (and a copy for its cache key), so those are not built and the bytes are given.
- Balance: per ring step, the largest number of non-empty (q block, KV block) pairs any chip computes
  (1024-token blocks, upstream's heuristic for these lengths), plain against head-tail.
Prints JSON.
"""

import json
import sys
import time
import tracemalloc
from pathlib import Path

import jax
import jax.numpy as jnp

TOKENS = (32768, 131072, 1048576)
CHIPS, HEADS, KV_HEADS, DIM = 8, 8, 2, 128


def _measured(fn):  # noqa: ANN001, ANN202
    tracemalloc.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, {"seconds": round(seconds, 3), "peak_mib": round(peak / 2**20, 1)}


def _mesh(emulation):  # noqa: ANN001, ANN202
    device = jax.sharding.AbstractDevice(emulation.CHIPS["v6e"][0], 1, "tpu")
    return jax.sharding.AbstractMesh((CHIPS,), ("sp",), axis_types=(jax.sharding.AxisType.Auto,),
                                     abstract_device=device)


def ours(tokamax, tokens: int, balanced: bool) -> dict:  # noqa: ANN001
    mesh = _mesh(tokamax.emulation)
    layout = tokamax.ring.Layout(mesh, "sp", None, None, False, True, balanced)
    q = jax.ShapeDtypeStruct((1, HEADS, tokens, DIM), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, KV_HEADS, tokens, DIM), jnp.bfloat16)
    lse = jax.ShapeDtypeStruct((1, HEADS, tokens), jnp.float32)

    def lower() -> list[str]:
        with tokamax.ops.config.cross_compile(True), tokamax.emulation.emulated_chip("v6e"), \
                jax.sharding.use_abstract_mesh(mesh):
            fwd = jax.jit(tokamax.ring.sharded.forward(layout)).trace(q, kv, kv, None)
            bwd = jax.jit(tokamax.ring.sharded.backward(layout)).trace(q, kv, kv, None, q, lse, q)
            return [t.lower(lowering_platforms=("tpu",)).as_text() for t in (fwd, bwd)]

    modules, cost = _measured(lower)
    return {**cost, "module_bytes": [len(m) for m in modules],
            "kernels": [m.count("tpu_custom_call") for m in modules]}


def upstream_dense(tokamax, tokens: int) -> dict:  # noqa: ANN001
    import dataclasses
    import importlib

    splash = importlib.import_module(f"{tokamax.__name__}._ported._src.ops.experimental.tpu.splash_attention"
                                     ".splash_attention_kernel")
    masks = importlib.import_module(f"{tokamax.__name__}._ported._src.ops.experimental.tpu.splash_attention"
                                    ".splash_attention_mask")
    config = dataclasses.replace(splash.SplashConfig.get_default(), use_base2_exp=False)

    def make():  # noqa: ANN202
        with jax.ensure_compile_time_eval():
            return tokamax.ring_attention.make_ring_attention(
                masks.make_causal_mask((tokens, tokens)), config=config, is_mqa=False, ring_axis="sp",
                q_seq_shards=CHIPS, kv_seq_shards=CHIPS)

    kernel, cost = _measured(make)
    return {**cost, "schedule_entries": int(kernel.fwd_mask_info.active_rows.size)}


def main() -> int:
    import kernels

    tokamax = kernels.get_local_kernel(Path(sys.argv[1]))
    out = {"chips": CHIPS, "ours": {}, "upstream": {}, "busiest_step": {}}
    for tokens in TOKENS:
        out["ours"][tokens] = {name: ours(tokamax, tokens, balanced)
                               for name, balanced in (("plain", False), ("balanced", True))}
        out["busiest_step"][tokens] = {
            name: {k: v for k, v in tokamax.ring.schedule.busiest_step(tokens, CHIPS, balanced, 1024).items()
                   if k in ("max", "total", "per_step")}
            for name, balanced in (("plain", False), ("balanced", True))}
        if tokens <= 32768:
            out["upstream"][tokens] = upstream_dense(tokamax, tokens)
        else:
            out["upstream"][tokens] = {"not_built": True, "dense_mask_bytes": tokens * tokens}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
