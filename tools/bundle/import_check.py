"""The bundle's import check, run in a clean interpreter: `python import_check.py VARIANT_DIR`.

Like kernel-builder's Nix check it loads the variant with `kernels.get_local_kernel`; on top
of that it blocks upstream tokamax's dropped dependencies, imports every kernel module and
fails if anything named `tokamax` leaked into sys.modules (all must live under the kernel id).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import importguard  # noqa: E402


def main(variant: Path) -> int:
    importguard.install()
    import kernels

    kernel = kernels.get_local_kernel(variant)
    for name in kernel.KERNEL_MODULES:
        getattr(kernel, name)
    leaked = [m for m in sys.modules if m == "tokamax" or m.startswith("tokamax.")]
    if leaked:
        print(f"import check: modules named tokamax leaked into sys.modules: {leaked[:10]}", file=sys.stderr)
        return 1
    print(f"import check: {kernel.__name__} loaded from {variant}, "
          f"{len(kernel.KERNEL_MODULES)} kernel modules imported")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
