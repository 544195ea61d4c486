"""The grouped matmul's tile rule and the v5e as the package weighs it, shared by the tiles' tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiles(kernel):
    return kernel.moe.tiles


@pytest.fixture(scope="module")
def v5e(kernel):
    return kernel.roofline.Chip("v5e", *kernel.roofline.MEASURED["TPU v5 lite"], mxu=128, vmem=128 << 20,
                                hbm=16 << 30, generation=5, kind="TPU v5 lite")
