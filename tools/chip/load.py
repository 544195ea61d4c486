"""The built bundle as a plain package (no `kernels`, no torch): what a JAX user on a TPU VM imports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "build/torch-tpu"
NAME = "tokamax_chip"


def package(root: Path = BUNDLE) -> ModuleType:
    """The bundle at `root` imported under the name `tokamax_chip` (once per process)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    init = root / "__init__.py"
    if not init.exists():
        raise FileNotFoundError(f"tools.chip: no bundle at {root} (run ./build.sh first, and carry build/torch-tpu)")
    spec = importlib.util.spec_from_file_location(NAME, init, submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module
