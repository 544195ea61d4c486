"""Run in the upstream venv (tokamax 0.0.17): `python upstream_run.py OUT.json`. Lowers every
kernel-level splash case of `cases.py` with upstream's own call, on every chip, normalised, each from
an empty `_process_mask` cache (a hit would hand out an earlier lowering's arrays: test_determinism.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.public.normalise import normalise  # noqa: E402
from tests.jax.splash.cases import CASES, CHIPS, SPLASH, constants_in_order, lower, upstream  # noqa: E402


def _emulation():  # noqa: ANN202 - our standalone chip helpers, loaded by path
    spec = importlib.util.spec_from_file_location("kernel_emulation", REPO / "torch-ext/tokamax/emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(out: Path) -> int:
    import tokamax

    emulation = _emulation()
    cache = importlib.import_module(f"tokamax.{SPLASH}.splash_attention_mask_info")._process_mask
    modules = {}
    for case in CASES:
        for chip in CHIPS:
            cache.cache_clear()  # each lowering from an empty mask cache: none depends on the ones before
            text = lower(upstream(case), case, chip, tokamax.config.cross_compile, emulation)
            modules[f"{case.id}@{chip}"] = constants_in_order(normalise(text))
    out.write_text(json.dumps({"jax": jax.__version__, "modules": modules}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
