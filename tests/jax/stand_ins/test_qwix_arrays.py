"""A weight quantized with qwix itself (`qwix.QArray`, what MaxText and other qwix users hold) is
taken wherever the vendored QArray is, with the same results: this kernel's ragged dot, through
upstream's public op on XLA and on the Mosaic kernel (interpret mode), bit-identical for both.
Runs `qwix_arrays.py` in the upstream venv, where qwix 0.1.8 is installed (the kernel never imports
qwix: its QArray recognises qwix's by class)."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import PORTED, REPO, tier_python


def test_qwix_quantized_weights_give_the_vendored_results(tmp_path):
    out = tmp_path / "qwix.json"
    result = subprocess.run([tier_python("upstream"), str(REPO / "tests/jax/stand_ins/qwix_arrays.py"), str(PORTED),
                             str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["qwix_type"] == "qwix._src.core.qarray.QArray" and report["is_instance"]
    for implementation in ("xla", "mosaic"):
        assert report[implementation]["identical"] and report[implementation]["max_abs"] > 0, report
