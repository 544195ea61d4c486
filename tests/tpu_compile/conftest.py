"""The compile tier's fixtures: libtpu's environment, the built kernel, and the outcomes' report.

Runs in the Torch tier's venv (libtpu comes with torch-tpu). Without libtpu every test here skips,
saying so; ./test.sh fails a tier that ran nothing. `TOKAMAX_TPU_COMPILE=all` selects every case
(`./test.sh --all`), otherwise the default tier's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO, VARIANT
from tools.tpu_compile import libtpu

libtpu.configure()
EVERYTHING = os.environ.get("TOKAMAX_TPU_COMPILE", "") == "all"
REPORT = REPO / "build/test-reports/tpu-compile.json"
_OUTCOMES: list[dict] = []


@pytest.fixture(scope="session")
def kernel() -> ModuleType:
    """The built bundle, loaded as `kernels` loads a local kernel."""
    why = libtpu.missing()
    if why:
        pytest.skip(why)
    import kernels

    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    return kernels.get_local_kernel(VARIANT)


@pytest.fixture
def record():
    """Keeps an outcome for the tier's report (build/test-reports/tpu-compile.json)."""
    return _OUTCOMES.append


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _OUTCOMES:
        return
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    tmp = REPORT.with_suffix(".tmp")
    tmp.write_text(json.dumps(_OUTCOMES, indent=1))
    os.replace(tmp, REPORT)
    from tools.tpu_compile import table

    Path(REPORT.with_suffix(".txt")).write_text(table.render(_OUTCOMES))
