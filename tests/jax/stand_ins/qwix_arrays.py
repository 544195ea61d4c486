"""Run in the upstream venv (qwix 0.1.8 installed): `python qwix_arrays.py PORTED_DIR OUT.json`.

Quantizes a weight with qwix itself, builds the vendored QArray with the same fields, and runs this
kernel's (the ported tree's) ragged dot with each, through upstream's public op (XLA and, in Pallas TPU
interpret mode, the Mosaic kernel), recording whether qwix's QArray is taken and whether the two
outputs are bit-identical."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import qwix


def load_port(path: Path):  # noqa: ANN201 - the ported tree as a package of another name
    spec = importlib.util.spec_from_file_location("ported_tree", path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["ported_tree"] = module
    spec.loader.exec_module(module)
    return module


def main(ported: Path, out: Path) -> int:
    load_port(ported)
    vendored = importlib.import_module("ported_tree._vendor.qwix")
    api = importlib.import_module("ported_tree._src.ops.ragged_dot.api")
    config = importlib.import_module("ported_tree._src.config")
    r = np.random.default_rng(0)
    lhs = jnp.asarray(r.standard_normal((256, 256)), jnp.bfloat16)
    rhs = jnp.asarray(r.standard_normal((2, 256, 256)), jnp.bfloat16)
    sizes = jnp.array([100, 156], jnp.int32)
    theirs = qwix.quantize(rhs, "int8", channelwise_axes=(0, 2))
    ours = vendored.QArray(qvalue=theirs.qvalue, scale=theirs.scale, zero_point=theirs.zero_point,
                           qtype=theirs.qtype)
    report = {"qwix_type": f"{type(theirs).__module__}.{type(theirs).__name__}",
              "is_instance": isinstance(theirs, vendored.QArray)}
    spec = importlib.util.spec_from_file_location("emulation", ported.parent / "emulation.py")
    emulation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulation)
    for implementation in ("xla", "mosaic"):
        call = jax.jit(lambda a, b, implementation=implementation: api.ragged_dot(a, b, sizes,
                                                                                  implementation=implementation))
        outputs = []
        for q in (theirs, ours):
            with emulation.interpret_on_cpu("v6e"), config.cross_compile(True):
                outputs.append(np.asarray(call(lhs, q)))
        report[implementation] = {"identical": outputs[0].tobytes() == outputs[1].tobytes(),
                                  "max_abs": float(np.abs(outputs[0].astype(np.float32)).max())}
    out.write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
