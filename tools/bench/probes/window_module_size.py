"""Probe: the lowered module of a sliding-window splash call (window 128, causal) on v6e, as bytes of
StableHLO text, at 1024, 4096 and 8192 tokens, 8 query and 2 KV heads of 128, bf16.

    python window_module_size.py ours VARIANT_DIR     (JAX tier: tokamax.splash, the lazy LocalMask)
    python window_module_size.py upstream            (upstream venv: tokamax 0.0.17's public call)
Upstream's public call turns the LocalMask into a dense [len, len] boolean constant; ours keeps it lazy.
Prints {length: {"bytes", "lower_s", "mosaic_kernels"}} as JSON.
"""

import importlib.util
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

REPO = Path(__file__).resolve().parents[3]
LENGTHS = (1024, 4096, 8192)
HEADS, KV_HEADS, DIM, WINDOW = 8, 2, 128, 128


def _emulation():  # noqa: ANN202 - our standalone chip helpers, by path (also in the upstream venv)
    spec = importlib.util.spec_from_file_location("kernel_emulation", REPO / "torch-ext/tokamax/emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(variant: Path):  # noqa: ANN201
    import kernels

    tokamax = kernels.get_local_kernel(variant)
    spec = tokamax.splash.MaskSpec.of(True, (WINDOW - 1, 0))

    def call(q, k, v):  # noqa: ANN001, ANN202
        return tokamax.splash.attend(q[None], k[None], v[None], None, None, None, spec=spec)[0][0]
    return call, tokamax.ops.config.cross_compile


def upstream():  # noqa: ANN201
    from tokamax._src.ops.experimental.tpu.splash_attention import splash_attention_mask as mask_lib

    import tokamax

    def call(q, k, v):  # noqa: ANN001, ANN202
        mask = mask_lib.LocalMask((q.shape[1], k.shape[1]), window_size=(WINDOW - 1, 0), offset=0)
        return tokamax.ops.experimental.splash_attention(q, k, v, mask, implementation="mosaic_tpu")
    return call, tokamax.config.cross_compile


def main() -> int:
    side = sys.argv[1]
    call, cross_compile = ours(Path(sys.argv[2])) if side == "ours" else upstream()
    emulation = _emulation()
    out = {}
    for length in LENGTHS:
        q = jax.ShapeDtypeStruct((HEADS, length, DIM), jnp.bfloat16)
        kv = jax.ShapeDtypeStruct((KV_HEADS, length, DIM), jnp.bfloat16)
        with cross_compile(True), emulation.emulated_chip("v6e"), \
                jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
            start = time.perf_counter()
            text = jax.jit(lambda q, k, v: call(q, k, v)).trace(q, kv, kv).lower(lowering_platforms=("tpu",)).as_text()
            seconds = time.perf_counter() - start
        out[length] = {"bytes": len(text), "lower_s": seconds, "mosaic_kernels": text.count("@tpu_custom_call(")}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
