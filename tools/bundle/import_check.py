"""The bundle's import check, run in a clean interpreter: `python import_check.py [--get-kernel] VARIANT_DIR`.

Like kernel-builder's Nix check it loads the variant with `kernels.get_local_kernel`; on top
of that it blocks upstream tokamax's dropped dependencies, imports every kernel module and
fails if anything named `tokamax` leaked into sys.modules (all must live under the kernel id).

`--get-kernel` loads it as a Torch user does instead: torch first (torch-tpu loads with it and
brings absl and immutabledict, which stay importable; the rest stay blocked), then
`kernels.get_kernel("kernels-community/tokamax", version=1)` through LOCAL_KERNELS, every kernel
module, and `torch_ops` (every Torch op registered with this torch).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import importguard  # noqa: E402

REPO_ID = "kernels-community/tokamax"


def main(argv: list[str]) -> int:
    through_get_kernel = "--get-kernel" in argv
    variant = Path(next(a for a in argv if not a.startswith("--")))
    if through_get_kernel:
        import torch

        importguard.install(skip_loaded=True)
        import kernels

        os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={variant.resolve()}"
        kernel = kernels.get_kernel(REPO_ID, version=1)
    else:
        importguard.install()
        import kernels

        kernel = kernels.get_local_kernel(variant)
    for name in kernel.KERNEL_MODULES:
        getattr(kernel, name)
    torch_side = ""
    if through_get_kernel:
        ops = kernel.torch_ops
        torch_side = f", torch {torch.__version__}: {len(ops.families)} Torch op families registered"
    leaked = [m for m in sys.modules if m == "tokamax" or m.startswith("tokamax.")]
    if leaked:
        print(f"import check: modules named tokamax leaked into sys.modules: {leaked[:10]}", file=sys.stderr)
        return 1
    how = f"get_kernel({REPO_ID!r}, version=1)" if through_get_kernel else "get_local_kernel"
    print(f"import check: {kernel.__name__} loaded from {variant} by {how}, "
          f"{len(kernel.KERNEL_MODULES)} kernel modules imported{torch_side}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
