"""Run by test_sharded_values in a process of its own (host_devices.py): `python values_run.py CASE...`.

Each case's sharded call over 8 host CPU devices against the same op on the whole arrays on one
device, both in Pallas TPU interpret mode as v6e: the output, and the gradients where the op has a VJP
(`cases.program`: forward and backward in one program per side).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tests.jax.sharded import host_devices  # noqa: E402

CHECKS = host_devices.start(8)

import jax  # noqa: E402
import kernels  # noqa: E402
import numpy as np  # noqa: E402

from tests.jax.cases import on_tensorcores  # noqa: E402
from tests.jax.public import api as api_lib  # noqa: E402
from tests.jax.sharded.cases import BY_ID, program  # noqa: E402


def _errors(names: list[str], got: object, want: object, rtol: float, atol: float) -> dict:
    """Per output ("out", then "d<argument>"): the worst |sharded - whole| against rtol |whole| + atol."""
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    report = {}
    for name, g, w in zip(names, got, want, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, f"{name}: shape {g.shape}, whole call {w.shape}"
        diff = np.abs(g - w)
        report[name] = {"max_abs": float(diff.max()), "max_ref": float(np.abs(w).max()),
                        "excess": float((diff - (rtol * np.abs(w) + atol)).max()), "finite": bool(np.isfinite(g).all())}
    return report


def _cpu_devices_as_one_core() -> None:
    """Host CPU devices count as one-core chips in a mesh's abstract device, as the interpreted TPU
    chip they stand for: kernels that build a `pltpu.TensorCoreMesh` read the core count from the mesh
    a shard_map runs in, which JAX leaves unset for CPU devices (outside a shard_map,
    `tests.jax.cases.on_tensorcores` sets an abstract one-core mesh instead). This process only."""
    from jax._src import mesh as mesh_lib

    original = mesh_lib.abstract_device_from

    def one_core(device):  # noqa: ANN001, ANN202
        abstract = original(device)
        if abstract is not None and abstract.platform == "cpu" and abstract.num_cores is None:
            return jax.sharding.AbstractDevice(device_kind=abstract.device_kind, num_cores=1, platform="cpu")
        return abstract

    mesh_lib.abstract_device_from = one_core


def main() -> int:
    _cpu_devices_as_one_core()
    kernel = kernels.get_local_kernel(REPO / "build/torch-tpu")
    api = api_lib.ours(kernel)
    for check in CHECKS:
        case = BY_ID[check]
        mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")).reshape(case.mesh_shape), case.axes)
        inputs = case.inputs()
        sharded = program(case.sharded(api, mesh), case.grads)
        whole = program(on_tensorcores(case.unsharded(api)), case.grads)
        names = ["out", *(f"d{i}" for i in case.grads or ())]
        with kernel.emulation.interpret_on_cpu("v6e"), api.config.cross_compile(True):
            errors = _errors(names, jax.jit(sharded)(*inputs), jax.jit(whole)(*inputs), *case.tolerance)
        host_devices.report(check, devices=len(jax.devices("cpu")), errors=errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
