"""Run by test_lazy_load in a fresh interpreter: `python lazy_probe.py VARIANT_DIR`.

Loads the kernel, lowers a public ragged dot (upstream's Op layer, its table lookup), and reports
which autotuning modules were imported then, and after the first use of `ops.autotune`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_WATCHED = ("_src.autotuning.api", "_src.hlo_utils", "_src.hlo_utils_common", "tuning")


def _loaded(root: str) -> list[str]:
    found = [name for name in _WATCHED if f"{root}.{name}" in sys.modules or f"{root}._ported.{name}" in sys.modules]
    return found


def main(variant: Path) -> int:
    import kernels

    kernel = kernels.get_local_kernel(variant)
    after_load = _loaded(kernel.__name__)
    import jax
    import jax.numpy as jnp

    with kernel.ops.config.cross_compile(True), kernel.emulation.emulated_chip("v6e"), \
            jax.sharding.use_abstract_mesh(kernel.emulation.tpu_mesh("v6e")):
        jax.jit(lambda a, b, g: kernel.ops.ragged_dot(a, b, g)).trace(
            jax.ShapeDtypeStruct((256, 128), jnp.bfloat16), jax.ShapeDtypeStruct((2, 128, 128), jnp.bfloat16),
            jax.ShapeDtypeStruct((2,), jnp.int32)).lower(lowering_platforms=("tpu",))
    after_call = _loaded(kernel.__name__)
    kernel.ops.autotune  # noqa: B018 - the first use loads it
    print(json.dumps({"after_load": after_load, "after_call": after_call, "after_autotune": _loaded(kernel.__name__)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
