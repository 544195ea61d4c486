"""Run by test_ring_attention in a fresh process: `python ring_check.py DEVICES MQA SEGMENTED GRADS`.

Loads the built kernel with `kernels`, runs ring attention over DEVICES host CPU devices (and no
more: idle devices made stalls likelier) in
interpret mode, compares with dense attention and prints the worst errors as JSON. A process of
its own per case keeps one XLA CPU collective (which can stall under load in interpret mode)
from hanging the whole test session: the test times the process out instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
DEVICE_COUNT = f"--xla_force_host_platform_device_count={sys.argv[1]}"  # as many as the ring has
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), DEVICE_COUNT])

import jax  # noqa: E402
import kernels  # noqa: E402
import numpy as np  # noqa: E402

from tests.jax.cases import resolver  # noqa: E402
from tests.jax.cases.ring_attention import AXIS, ring_fn, ring_inputs, ring_reference  # noqa: E402


def main(devices: int, is_mqa: bool, segmented: bool, grads: bool) -> int:
    kernel = kernels.get_local_kernel(REPO / "build/torch-tpu")
    get = resolver(f"{kernel.__name__}._ported")
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:devices]), (AXIS,))
    inputs = ring_inputs(devices, is_mqa, segmented, grads)
    with kernel.emulation.interpret_on_cpu("v6e"):
        out = jax.jit(ring_fn(get, mesh, devices, is_mqa, segmented, grads))(*inputs)
    expected = ring_reference(get, devices, is_mqa, segmented, grads)(*inputs)
    report = {}
    outs, refs = jax.tree.leaves(out), jax.tree.leaves(expected)
    assert len(outs) == len(refs) == (4 if grads else 1), f"{len(outs)} outputs, {len(refs)} in the reference"
    for name, o, e in zip(["out", "dq", "dk", "dv"][: len(outs)], outs, refs, strict=True):
        o, e = np.asarray(o, np.float64), np.asarray(e, np.float64)
        assert o.shape == e.shape, f"{name}: shape {o.shape}, reference {e.shape}"
        report[name] = {"max_abs": float(np.max(np.abs(o - e))), "max_ref": float(np.max(np.abs(e))),
                        "excess": float(np.max(np.abs(o - e) - (1e-4 * np.abs(e) + 2e-5)))}
    print(json.dumps({"devices": len(jax.devices("cpu")), "errors": report}))
    return 0


if __name__ == "__main__":
    flags = [a == "1" for a in sys.argv[2:5]]
    sys.exit(main(int(sys.argv[1]), *flags))
