"""Run in the upstream venv (tokamax 0.0.17): `python upstream_run.py OUT.json`.

Writes, for the tests to compare against this kernel:
- `modules`: every public case lowered with upstream's public call, normalised;
- `selection`: for every key of every shipped table this kernel ports (`cases.all_tables`) on
  every chip, the config upstream's Op chooses, the keys parsed by upstream's own cache code.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402

from tests.jax.public import api as api_lib  # noqa: E402
from tests.jax.public.cases import CHIPS, all_public_cases, all_tables, config_fields  # noqa: E402
from tests.jax.public.lowering import lower_public  # noqa: E402


def _emulation():  # noqa: ANN202 - load our standalone chip helpers by path
    spec = importlib.util.spec_from_file_location("kernel_emulation", REPO / "torch-ext/tokamax/emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _selection(api: api_lib.PublicApi, emulation) -> dict:  # noqa: ANN001
    from importlib import resources

    out = {}
    for table in all_tables():
        op = table.op(api)
        for chip in table.chips():
            raw = resources.files("tokamax").joinpath(f"data/autotuning/{CHIPS[chip]}/{table.stem}.json").read_text()
            keys = [json.loads(k) for k in json.loads(raw)]
            parsed = list(api.cache_adapter(op).validate_json(raw))
            assert len(parsed) == len(keys)
            rows = []
            with api.config.cross_compile(True), emulation.emulated_chip(chip), \
                    jax.sharding.use_abstract_mesh(emulation.tpu_mesh(chip)):
                for key, args in zip(keys, parsed, strict=True):
                    try:
                        rows.append([key, config_fields(op.bind(**args).default_config)])
                    except Exception as e:  # recorded; the test says which key
                        rows.append([key, f"error: {type(e).__name__}: {e}"])
            out[f"{table.id}@{chip}"] = rows
    return out


def main(out: Path) -> int:
    import tokamax  # noqa: F401

    api, emulation = api_lib.upstream(), _emulation()
    report = {"jax": jax.__version__, "modules": {}, "errors": {}}
    for case in all_public_cases():
        key = f"{case.id}@{case.chip}"
        try:
            report["modules"][key] = lower_public(case, api, emulation)
        except Exception:  # reported per case; the test names it
            report["errors"][key] = traceback.format_exc(limit=6)
    report["selection"] = _selection(api, emulation)
    out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
