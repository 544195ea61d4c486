"""Run by test_minimal_envs in a venv holding only JAX: `python import_package.py PACKAGE_DIR`.

Loads the kernel package under a name that is not `tokamax`, with upstream's dropped dependencies
and the upstream suite's test-only libraries blocked (and tqdm, the progress bar's optional one),
imports every kernel module, every public op (upstream's Op layer) and the JAX splash layer
(`splash`, with upstream's lazy masks it builds), autotunes a small ragged dot in interpret mode
(progress bar asked for, so its absence is what runs) and reads the result back through
`tuning`, and prints what happened as JSON.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import importguard  # noqa: E402


def main(package_dir: Path) -> int:
    blocked = importguard.DROPPED + importguard.TEST_ONLY + ("tqdm",)
    importguard.install(blocked)
    spec = importlib.util.spec_from_file_location(
        "kernel_under_test", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_under_test"] = module
    spec.loader.exec_module(module)
    imported = [getattr(module, name).__name__ for name in module.KERNEL_MODULES]
    public = []  # upstream's Op layer: every name of every public namespace
    for prefix, namespace in (("", module.ops), ("tpu.", module.ops.tpu), ("experimental.", module.ops.experimental),
                              ("experimental.tpu.", module.ops.experimental.tpu)):
        public += [prefix + name for name in namespace.__all__ if getattr(namespace, name) is not None]
    mask = module.splash.MaskSpec.of(True, (127, 0)).lazy((256, 256), 0)
    import jax
    import jax.numpy as jnp

    emulation, lhs, rhs = module.emulation, jnp.ones((128, 128), jnp.bfloat16), jnp.ones((2, 128, 128), jnp.bfloat16)
    with module.ops.config.cross_compile(True), emulation.interpret_on_cpu("v6e"), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh("v6e")):
        result = module.ops.autotune(lambda a, b, g: module.ops.ragged_dot(a, b, g), lhs, rhs,
                                     jnp.asarray([64, 64], jnp.int32), progress_bar=True)
    read_back = module.tuning.files.parse(result.dumps(prune_errors=True), "<autotuned here>")

    print(json.dumps({"python": "{}.{}".format(*sys.version_info[:2]), "jax": jax.__version__, "imported": imported,
                      "public": public, "splash_mask": type(mask).__name__,
                      "autotuned": [len(data) for _, data in read_back.data], "device_kind": read_back.device_kind,
                      "dropped_loaded": importguard.loaded(blocked)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
