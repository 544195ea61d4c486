"""Probe (JAX tier): KV slots one decode step reads from a 4096-slot static cache, per sequence and
layer, summed over the kernel's heads (`tokamax.splash.kv_slots_read`: the schedule upstream's kernel
runs, after its segment ids prune it), at fill levels 37, 1000, 2048 and 4096.

    python decode_reads.py VARIANT_DIR
Layers: Qwen3-30B-A3B-like attention (32 query, 4 KV heads of 128), GPT-OSS-like (64 query, 8 KV
heads of 64, sinks) full and 128-token window layers; query heads fold onto their KV head in both.
Against them, dense attention over the cache reads all 4096 slots of every KV head, and of every
query head where K and V are repeated per query head (transformers' sdpa path with a cache's mask,
off CUDA/XPU/MPS). Prints JSON.
"""

import json
import sys
from pathlib import Path

import jax.numpy as jnp
import kernels

SLOTS, FILLS = 4096, (37, 1000, 2048, 4096)
LAYERS = {  # name: (heads, kv_heads, head_dim, sinks, window)
    "qwen3-30b-a3b": (32, 4, 128, False, None),
    "gpt-oss full": (64, 8, 64, True, None),
    "gpt-oss window 128": (64, 8, 64, True, 128),
}


def main() -> int:
    tokamax = kernels.get_local_kernel(Path(sys.argv[1]))
    splash = tokamax.splash
    out = {}
    for name, (heads, kv_heads, dim, sinks, window) in LAYERS.items():
        spec = splash.MaskSpec.of(True, None if window is None else (window - 1, 0))
        q, kv = jnp.zeros((1, heads, 1, dim), jnp.bfloat16), jnp.zeros((1, kv_heads, SLOTS, dim), jnp.bfloat16)
        sink_logits = jnp.zeros((heads,), jnp.float32) if sinks else None
        rows = {}
        for fill in FILLS:
            ids = (jnp.arange(SLOTS) < fill).astype(jnp.int32)[None]
            with tokamax.emulation.emulated_chip("v6e"), tokamax.ops.config.cross_compile(True):
                reads = splash.kv_slots_read(q, kv, kv, ids[:, fill - 1:fill], ids, jnp.int32(fill - 1), sink_logits,
                                             spec=spec)
            rows[fill] = int(reads)
        out[name] = {"tokamax": rows, "dense": SLOTS * kv_heads, "dense_repeated": SLOTS * heads,
                     "heads": heads, "kv_heads": kv_heads}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
