"""Run by test_bundle in a fresh interpreter: `python load_kernel.py MODE VARIANT_DIR`.

MODE get_local_kernel / get_kernel: load the kernel as users do (the latter through
LOCAL_KERNELS), touch every public name of every kernel module, report as JSON.
MODE get_kernel_after_torch: the same after `import torch` (which loads torch-tpu and what it needs).
MODE lazy: load it and report which kernel modules (and whether JAX) got imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import importguard  # noqa: E402


def main(mode: str, variant: Path) -> int:
    preloaded: list[str] = []
    if mode == "get_kernel_after_torch":  # as a Torch user does: torch (and torch-tpu) come first
        import torch  # noqa: F401

        preloaded = importguard.loaded()
        mode = "get_kernel"
    importguard.install(skip_loaded=bool(preloaded))
    import kernels

    if mode == "get_local_kernel":
        kernel = kernels.get_local_kernel(variant)
    else:
        kernel = kernels.get_kernel("kernels-community/tokamax", version=1)
    if mode == "lazy":
        prefix = kernel.__name__ + "._ported."
        print(json.dumps({"kernel_modules_loaded": sorted(m for m in sys.modules if m.startswith(prefix)),
                          "jax_loaded": "jax" in sys.modules}))
        return 0
    modules = []
    for name in kernel.KERNEL_MODULES:
        module = getattr(kernel, name)
        for public in module.__all__:
            getattr(module, public)
        modules.append(module.__name__)
    print(json.dumps({
        "name": kernel.__name__,
        "version": kernel.__version__,
        "tokamax_version": kernel.TOKAMAX_VERSION,
        "modules": modules,
        "tokamax_modules": sorted(m for m in sys.modules if m == "tokamax" or m.startswith("tokamax.")),
        "dropped_loaded": sorted(set(importguard.loaded()) - set(preloaded)),
        "preloaded_by_torch": preloaded,
        "torch_backends": sorted(m for m in sys.modules if m == "torch_tpu"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
