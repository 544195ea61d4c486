"""The JSON form of op arguments: floats as upstream's pydantic writes them in the profiling payload.

The expected texts were written by pydantic 2 (`TypeAdapter(list[float]).dump_json`) in the upstream
venv; the public-call identity tests compare whole payloads too (e.g. eps 1e-6 in deepseek_rope, mhc).
"""

from __future__ import annotations

import importlib

import pytest

PYDANTIC = {1e-6: "1e-6", 5e-5: "0.00005", 1e-5: "0.00001", 1e-4: "0.0001", 0.08838834764831843: "0.08838834764831843",
            -2.381976426469702e38: "-2.381976426469702e+38", 1.0: "1.0", 100.0: "100.0", 1e16: "1e+16",
            1e15: "1000000000000000.0", -0.5: "-0.5", 1e-7: "1e-7", 2.5e-10: "2.5e-10", float("-inf"): "null",
            12345678901234567.0: "1.2345678901234568e+16", 0.00012: "0.00012"}


@pytest.mark.kernels_ci
def test_floats_are_written_as_pydantic_writes_them(kernel):
    spec_json = importlib.import_module(f"{kernel.__name__}._ported._compat.spec_json")
    got = {value: spec_json.dumps([value]).decode()[1:-1] for value in PYDANTIC}
    assert got == PYDANTIC
