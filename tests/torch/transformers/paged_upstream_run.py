"""Run in the upstream venv (tokamax 0.0.17): `python paged_upstream_run.py CASES.json OUT.json`.

Lowers, for each case (chip, argument shapes and dtypes, keyword options), upstream's public call
`tokamax.ops.batched_ragged_paged_attention(..., implementation="mosaic_tpu")` for that TPU chip with the public
identity test's machinery (tests/jax/public: `lower_public`, upstream's cross-compile, the chip emulated, its
abstract mesh; `normalise`), and writes the normalised modules (or the error) per case, with the jax version.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.public import api as api_lib  # noqa: E402
from tests.jax.public.cases import PublicCase  # noqa: E402
from tests.jax.public.lowering import lower_public  # noqa: E402
from tests.jax.public.upstream_run import _emulation  # noqa: E402


def _case(raw: dict) -> PublicCase:
    specs = tuple((tuple(shape), dtype) for shape, dtype in raw["specs"])
    options = raw["options"]
    build = lambda api: (lambda *arrays: api.ops.batched_ragged_paged_attention(  # noqa: E731
        *arrays, implementation="mosaic_tpu", **options))
    return PublicCase(raw["id"], raw["chip"], specs, build)


def main(cases: Path, out: Path) -> int:
    api, emulation = api_lib.upstream(), _emulation()
    report = {"jax": jax.__version__, "modules": {}, "errors": {}}
    for raw in json.loads(cases.read_text()):
        key = f"{raw['id']}@{raw['chip']}"
        try:
            report["modules"][key] = lower_public(_case(raw), api, emulation)
        except Exception:  # reported per case; the test names it
            report["errors"][key] = traceback.format_exc(limit=6)
    out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
