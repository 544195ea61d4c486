"""Every Torch op upstream's release offers (`tokamax.experimental.torch_tpu.ops`) exists here under
its name, read from the hash-pinned release artifact the port reads, so a bump that adds one fails
until it has a family module here."""

from __future__ import annotations

import ast

import pytest

from tools.porter import artifacts

UPSTREAM_INIT = "tokamax/experimental/torch_tpu/ops/__init__.py"


def _upstream_torch_ops(artifact_paths: dict) -> set[str]:
    path = artifact_paths["tokamax"]
    files = artifacts.read_artifact(path, "sdist" if path.name.endswith(".tar.gz") else "wheel")
    init = [data for name, data in files.items() if name.endswith(UPSTREAM_INIT)]
    assert len(init) == 1, f"{UPSTREAM_INIT} not found once in {path.name}"
    return {alias.asname or alias.name for node in ast.parse(init[0]).body if isinstance(node, ast.ImportFrom)
            and node.module and node.module.endswith(".torch_pallas_mosaic_tpu") for alias in node.names}


@pytest.mark.kernels_ci
def test_every_torch_op_upstream_offers_is_here(ops, artifact_paths):
    upstream = _upstream_torch_ops(artifact_paths)
    assert len(upstream) >= 20, sorted(upstream)  # the 0.0.17 set; fewer means the parse went wrong
    missing = sorted(upstream - set(ops.__all__))
    assert not missing, f"upstream's Torch ops without one here: {missing}"
    assert all(callable(getattr(ops, name)) for name in upstream)
