"""JAX tier fixtures: the kernel loaded as users load it, and its modules by upstream path."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import kernels
import pytest

from tests.conftest import VARIANT
from tests.jax.cases import Resolver, resolver

# Set before JAX starts its CPU backend and passed on to the ring checks: collective timeouts
# long enough for interpret mode on two cores, where one device's kernel can run a minute
# behind the others (XLA's default kills the process at 40 s).
_XLA_FLAGS = ("--xla_cpu_collective_call_warn_stuck_timeout_seconds=300",
              "--xla_cpu_collective_call_terminate_timeout_seconds=1200")
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *_XLA_FLAGS]).strip()


@pytest.fixture(scope="session")
def kernel() -> ModuleType:
    assert (VARIANT / "metadata.json").exists(), "build the bundle first (./build.sh; the test command does)"
    return kernels.get_local_kernel(VARIANT)


@pytest.fixture(scope="session")
def get(kernel) -> Resolver:
    """Kernel modules by their path below the ported root, e.g. `_src.ops.topk.reference`."""
    return resolver(f"{kernel.__name__}._ported")


@pytest.fixture(scope="session")
def emulation(kernel) -> ModuleType:
    """The kernel's CPU-host helpers: the TPU chip is always chosen explicitly through these."""
    return kernel.emulation


@pytest.fixture(scope="session")
def our_lowering(get, emulation):
    """case, chip -> StableHLO text of this kernel's lowering (memoized: one lowering serves every check)."""
    from tests.jax.lowering import lower

    memo: dict[tuple[str, str], str] = {}

    def lowering(case, chip: str) -> str:  # noqa: ANN001
        key = (case.id, chip)
        if key not in memo:
            memo[key] = lower(case, get, emulation, chip)
        return memo[key]

    return lowering


@pytest.fixture(scope="session")
def our_bodies(our_lowering):
    """case, chip -> the Mosaic bodies of this kernel's lowering."""
    from tests.jax.lowering import mosaic_bodies

    return lambda case, chip: mosaic_bodies(our_lowering(case, chip))


def upstream_report(script: str, out: Path, *inputs: Path) -> dict:
    """Runs `script` (a path below the repo) in the upstream venv (tokamax 0.0.17) as `script
    INPUTS... OUT`, or reuses its report while nothing it depends on changed (tests/upstream_reference.py);
    it writes its JSON report to `out`. Returns the report, checked to come from the same jax as this tier."""
    import json

    import jax

    from tests import upstream_reference
    from tests.conftest import tier_python

    upstream_reference.run(tier_python("upstream"), script, out, *inputs)
    report = json.loads(out.read_text())
    assert report["jax"] == jax.__version__, "both sides must lower with the same jax"
    return report
