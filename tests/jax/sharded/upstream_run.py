"""Run in the upstream venv (tokamax 0.0.17): `python upstream_run.py OUT.json`. Writes every sharded
case lowered with upstream's own modules on every chip of `cases.CHIPS`, normalised (or the error
upstream raises), for test_sharded_lowering to compare against this kernel."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.public import api as api_lib  # noqa: E402
from tests.jax.public.normalise import normalise  # noqa: E402
from tests.jax.public.upstream_run import _emulation  # noqa: E402
from tests.jax.sharded.cases import CASES, CHIPS  # noqa: E402
from tests.jax.sharded.lowering import lower_sharded  # noqa: E402


def main(out: Path) -> int:
    api, emulation = api_lib.upstream(), _emulation()
    report = {"jax": jax.__version__, "modules": {}, "errors": {}}
    for case in CASES:
        for chip in CHIPS:
            key = f"{case.id}@{chip}"
            try:
                report["modules"][key] = normalise(lower_sharded(case, api, emulation, chip))
            except Exception:  # reported per case; the test names it
                report["errors"][key] = traceback.format_exc(limit=6)
    out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
