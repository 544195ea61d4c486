"""The vendored qwix (QArray, quantize, dequantize) is bit-identical to qwix 0.1.8 from PyPI.

Runs tests/jax/qwix_compare.py in the upstream venv, where qwix 0.1.8 (with flax) is installed:
int8, int4 and fp8, several channel axes and tilings, a zero point, eager and under jit, and
the same pytree (leaf paths, count and shapes).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PORTED, REPO, tier_python

pytestmark = pytest.mark.kernels_ci


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("qwix") / "compare.json"
    result = subprocess.run([tier_python("upstream"), str(REPO / "tests/jax/qwix_compare.py"),
                             str(PORTED / "_vendor/qwix"), str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["qwix"] == "0.1.8"
    return report["results"]


def test_every_setting_is_bit_identical_eager_and_jitted(comparison):
    assert len(comparison) >= 8 and any(r["has_zero_point"] for r in comparison.values())
    for name, r in comparison.items():
        assert r["eager_identical"] and r["jit_identical"], f"{name}: quantize differs from qwix 0.1.8"
        assert r["dequantize_identical"] and r["dequantize_jit_identical"], f"{name}: dequantize differs"


def test_pytree_structure_matches(comparison):
    for name, r in comparison.items():
        assert r["structure_ours"] == r["structure_upstream"], f"{name}: pytree differs"
