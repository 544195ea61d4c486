"""The autotuning modules load on first use: not with the kernel, not with a public op's call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import VARIANT


@pytest.mark.kernels_ci
def test_autotuning_loads_only_when_first_used():
    probe = Path(__file__).with_name("lazy_probe.py")
    result = subprocess.run([sys.executable, str(probe), str(VARIANT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["after_load"] == [] and report["after_call"] == []
    assert {"_src.autotuning.api", "_src.hlo_utils"} <= set(report["after_autotune"])
