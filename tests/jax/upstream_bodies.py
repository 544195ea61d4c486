"""Run in the upstream venv (tokamax 0.0.17 installed): `python upstream_bodies.py OUT.json`.

Lowers every case of tests/jax/cases against upstream `tokamax` for each of its chips, exactly
as the JAX tier lowers them against this kernel, and writes the sha256 of each Mosaic body and the
whole module, normalised as tests/jax/public/normalise.py says.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.cases import all_cases, resolver  # noqa: E402
from tests.jax.lowering import lower, mosaic_bodies  # noqa: E402
from tests.jax.public.normalise import normalise  # noqa: E402


def _emulation():  # noqa: ANN202 - our chip helpers are standalone; load them by path
    spec = importlib.util.spec_from_file_location("kernel_emulation", REPO / "torch-ext/tokamax/emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(out: Path) -> int:
    import tokamax

    emulation, get = _emulation(), resolver("tokamax")
    report = {"jax": jax.__version__, "tokamax": tokamax.__version__ if hasattr(tokamax, "__version__") else None,
              "bodies": {}, "modules": {}, "errors": {}}
    for case in all_cases():
        for chip in case.chips:
            key = f"{case.id}@{chip}"
            try:
                text = lower(case, get, emulation, chip)
                report["bodies"][key] = [hashlib.sha256(b.encode()).hexdigest() for b in mosaic_bodies(text)]
                report["modules"][key] = normalise(text)
            except Exception:  # reported per case; the test names it
                report["errors"][key] = traceback.format_exc(limit=5)
    out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
