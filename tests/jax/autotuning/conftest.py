"""One autotuning run per test session, shared: this kernel's `autotune` on the small ragged dot of
`calls`, in Pallas TPU interpret mode on this CPU host (the timings mean nothing here; what is
checked is the machinery: candidates, result, JSON, steering). Upstream's side runs once too."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import jax
import pytest

from tests.jax.autotuning import calls
from tests.jax.conftest import upstream_report


@pytest.fixture(scope="session")
def autotuning_api(kernel) -> ModuleType:  # noqa: ANN001
    return importlib.import_module(f"{kernel.__name__}._ported._src.autotuning.api")


@pytest.fixture(scope="session")
def ragged_op_class(kernel) -> type:  # noqa: ANN001
    return importlib.import_module(f"{kernel.__name__}._ported._src.ops.ragged_dot.pallas_mosaic_tpu"
                                   ).PallasMosaicTpuRaggedDot


@pytest.fixture(scope="session")
def tuned(kernel, emulation) -> dict:  # noqa: ANN001
    """This kernel's autotune of the call (interpret mode, the chip's abstract mesh), with the bound
    arguments and search space it saw."""
    fn = calls.public_call(kernel.ops)
    with kernel.ops.config.cross_compile(True), emulation.interpret_on_cpu(calls.CHIP), \
            jax.sharding.use_abstract_mesh(emulation.tpu_mesh(calls.CHIP)):
        (bound,) = kernel.ops.autotuning.get_bound_args(fn, *calls.arrays())
        space = bound.autotuning_configs
        heuristic = bound.heuristics_config
        result = kernel.ops.autotune(fn, *calls.arrays(), progress_bar=False)
    return {"bound": bound, "space": space, "heuristic": heuristic, "result": result}


@pytest.fixture(scope="session")
def tuned_file(tuned, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("autotuning") / "ours.json"
    path.write_text(tuned["result"].dumps(prune_errors=True))
    return path


@pytest.fixture(scope="session")
def upstream_side(tuned_file, tmp_path_factory) -> dict:
    """Upstream's reading of our result, and a result upstream's code made (see upstream_side.py)."""
    out = tmp_path_factory.mktemp("autotuning-upstream") / "upstream.json"
    return upstream_report("tests/jax/autotuning/upstream_side.py", out, tuned_file)
