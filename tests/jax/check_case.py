"""Developer tool: run one op's cases the way the tests do and print what happened.

    .venv/jax-tier/bin/python tests/jax/check_case.py OP [--no-interpret]

Loads the package from torch-ext/tokamax (run ./build.sh first) under a non-`tokamax` name,
lowers each case for each of its chips, and runs it in interpret mode against its reference.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from tests.jax.cases import all_cases, resolver  # noqa: E402
from tests.jax.lowering import lower, mosaic_bodies  # noqa: E402


def load_package(name: str = "kernel_under_check"):  # noqa: ANN201
    package = REPO / "torch-ext/tokamax"
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("op")
    parser.add_argument("--no-interpret", action="store_true")
    args = parser.parse_args()
    kernel = load_package()
    emulation = importlib.import_module(f"{kernel.__name__}.emulation")
    get = resolver(f"{kernel.__name__}._ported")
    cases = [c for c in all_cases() if c.id.split("/")[0] == args.op]
    if not cases:
        print(f"no cases for {args.op}")
        return 1
    ok = True
    for case in cases:
        inputs = case.inputs()
        for chip in case.chips:
            t = time.time()
            try:
                n = len(mosaic_bodies(lower(case, get, emulation, chip)))
                print(f"{case.id} lower {chip}: {n} Mosaic calls ({time.time() - t:.1f}s)")
                ok &= n > 0
            except Exception:
                ok = False
                print(f"{case.id} lower {chip}: FAILED\n{traceback.format_exc(limit=3)}")
        if args.no_interpret:
            continue
        if case.numerics_in:
            print(f"{case.id} interpret: checked in {case.numerics_in}")
            continue
        if case.interpret_xfail:
            print(f"{case.id} interpret: xfail declared: {case.interpret_xfail}")
        t = time.time()
        try:
            with emulation.interpret_on_cpu(case.interpret_chip):
                out = jax.jit(case.call(get))(*inputs)
            expected = case.reference(get)(*inputs) if case.reference else None
            if case.compare:
                case.compare(out, expected)
            elif expected is not None:
                rtol, atol = case.tolerance
                for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
                    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(e, np.float32),
                                               rtol=rtol, atol=atol)
            print(f"{case.id} interpret: OK vs reference ({time.time() - t:.1f}s)")
        except Exception:
            print(f"{case.id} interpret: FAILED ({time.time() - t:.1f}s)\n{traceback.format_exc(limit=4)}")
            ok = ok and bool(case.interpret_xfail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
