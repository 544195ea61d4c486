"""Torch tier fixtures: the built kernel loaded with `get_kernel` through LOCAL_KERNELS, as a user would."""

from __future__ import annotations

import os
import sys
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


@pytest.fixture(autouse=True)
def _no_attached_chip_left_behind():
    """A test that simulates a torch-tpu host (torch.tpu.get_device_name patched) has the Torch ops set the
    process's answer for the attached chip (`emulation.answer_for_attached`); it is undone after each test, so
    that the next one sees this host as it is (no TPU)."""
    yield
    for name, module in list(sys.modules.items()):
        if name.endswith(".emulation") and hasattr(module, "forget_attached"):
            module.forget_attached()
