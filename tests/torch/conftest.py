"""Torch tier fixtures: the built kernel loaded with `get_kernel` through LOCAL_KERNELS, as a user would."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from tests.conftest import VARIANT


@pytest.fixture(scope="session")
def tokamax() -> ModuleType:
    import kernels

    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    os.environ["LOCAL_KERNELS"] = f"kernels-community/tokamax={VARIANT}"
    return kernels.get_kernel("kernels-community/tokamax", version=1)


@pytest.fixture(scope="session")
def ops(tokamax) -> ModuleType:
    return tokamax.torch_ops
