"""Mosaic identity: for every case and chip, our serialized Mosaic bodies equal upstream's, byte for byte.

Upstream tokamax 0.0.17 (installed in its own venv for the tests only, never a dependency of
the kernel) lowers the same cases with the same jax in a subprocess (its report reused while nothing
it depends on changed: tests/upstream_reference.py); identical Mosaic bodies
mean the port runs on a TPU exactly as upstream does, speed and numerics alike.
"""

from __future__ import annotations

import hashlib
import json

import jax
import pytest

from tests import upstream_reference
from tests.conftest import tier_python
from tests.jax.cases import Case, all_cases


@pytest.fixture(scope="session")
def upstream(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("upstream") / "bodies.json"
    upstream_reference.run(tier_python("upstream"), "tests/jax/upstream_bodies.py", out)
    report = json.loads(out.read_text())
    assert report["tokamax"] == "0.0.17"
    assert report["jax"] == jax.__version__, "both sides must lower with the same jax"
    return report


@pytest.mark.parametrize(("case", "chip"), [pytest.param(c, chip, id=f"{c.id}@{chip}")
                                            for c in all_cases() for chip in c.chips])
def test_mosaic_bodies_equal_upstream(case: Case, chip: str, upstream, our_bodies):
    key = f"{case.id}@{chip}"
    assert key not in upstream["errors"], f"upstream failed to lower {key}:\n{upstream['errors'].get(key)}"
    ours = [hashlib.sha256(b.encode()).hexdigest() for b in our_bodies(case, chip)]
    theirs = upstream["bodies"][key]
    assert ours, f"{key}: no Mosaic kernel in our lowering"
    assert len(ours) == len(theirs), f"{key}: {len(ours)} Mosaic kernels here, {len(theirs)} upstream"
    differing = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert not differing, f"{case.id} on {chip}: Mosaic bodies {differing} differ from upstream tokamax 0.0.17"


@pytest.mark.parametrize(("case", "chip"), [pytest.param(c, chip, id=f"{c.id}@{chip}")
                                            for c in all_cases() for chip in c.chips])
def test_whole_module_equals_upstream(case: Case, chip: str, upstream, our_lowering):
    """Beyond the bodies: the whole module (the custom calls' full backend configs, the XLA code
    around them), normalised only as tests/jax/public/normalise.py says."""
    import difflib

    from tests.jax.public.normalise import normalise

    key = f"{case.id}@{chip}"
    assert key not in upstream["errors"], f"upstream failed to lower {key}:\n{upstream['errors'].get(key)}"
    ours, theirs = normalise(our_lowering(case, chip)), upstream["modules"][key]
    diff = difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "upstream", "ours", n=1, lineterm="")
    shown = "\n".join(line[:300] for line in list(diff)[:30])
    assert ours == theirs, f"{key}: the module differs from upstream's:\n{shown}"


def test_the_comparison_sees_a_different_kernel(get, emulation):
    """Guard against a vacuous check: another tiling of the same call lowers to other bytes."""
    import dataclasses
    import functools

    import jax.numpy as jnp

    from tests.jax.cases.ragged_dot import CASES
    from tests.jax.lowering import lower, mosaic_bodies

    case = CASES[0]
    retiled = dataclasses.replace(case, call=lambda get: functools.partial(
        get("_src.ops.ragged_dot.pallas_mosaic_tpu_kernel").gmm, precision=jax.lax.Precision.DEFAULT,
        out_dtype=jnp.float32, tiling=(128, 128, 256)))
    assert mosaic_bodies(lower(case, get, emulation, "v6e")) != mosaic_bodies(lower(retiled, get, emulation, "v6e"))
